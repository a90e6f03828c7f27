/* Extended attributes through --xattrmap on a virtio-fs share: the `xattrmap` case of
 * run-all.sh, with Docker Desktop's map `:prefix:all::user.docker.desktop.::bad:all:::` (every
 * guest name lives under `user.docker.desktop.` on the host; host names outside it are hidden).
 * A static binary: it prepares and verifies the share on the host and runs the checks in the
 * guest.
 *
 *   xattr-probe --make DIR     host, before boot: DIR/f with user.host=h (outside the prefix)
 *                              and user.docker.desktop.user.seen=s (the guest's user.seen)
 *   xattr-probe DIR            guest: the checks below on DIR/f
 *   xattr-probe --verify DIR   host, after the guest: the names the guest set are under the
 *                              prefix, the one it removed is gone, user.host is untouched
 *
 * Exits with the number of failed checks. Build: gcc -O2 -static -o xattr-probe xattr-probe.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>

#include "probe.h"

#define PREFIX "user.docker.desktop."

static char path[4096];

/* The value of `name` as a string ("" and errno set when it has none). */
static const char *value(const char *name)
{
	static char buf[256];
	ssize_t n = lgetxattr(path, name, buf, sizeof(buf) - 1);
	if (n < 0)
		return "";
	buf[n] = 0;
	return buf;
}

/* Whether the NUL-separated list `list` of `len` bytes holds `name`. */
static int listed(const char *list, ssize_t len, const char *name)
{
	for (ssize_t i = 0; i < len; i += strlen(list + i) + 1)
		if (!strcmp(list + i, name))
			return 1;
	return 0;
}

static void guest_checks(void)
{
	char list[4096];
	ssize_t len = llistxattr(path, list, sizeof(list));
	result(len >= 0, "list", "listxattr: %s", strerror(errno));
	if (len < 0)
		len = 0;
	result(listed(list, len, "user.seen"), "list-shows-the-guest-name", "%s", "user.seen missing");
	result(!listed(list, len, "user.host"), "list-hides-host-names", "%s", "user.host listed");
	result(!listed(list, len, PREFIX "user.seen"), "list-strips-the-prefix", "%s",
	       "the host name is listed");
	result(!strcmp(value("user.seen"), "s"), "get-mapped", "user.seen = '%s'", value("user.seen"));
	errno = 0;
	value("user.host");
	result(errno == ENODATA, "get-host-name-is-enodata", "errno %d", errno);
	int rc = lsetxattr(path, "user.foo", "bar", 3, 0);
	result(rc == 0, "set-user", "setxattr user.foo: %s", strerror(errno));
	result(!strcmp(value("user.foo"), "bar"), "get-after-set", "user.foo = '%s'",
	       value("user.foo"));
	rc = lsetxattr(path, "trusted.t", "x", 1, 0);
	result(rc == 0, "set-trusted", "setxattr trusted.t: %s", strerror(errno));
	rc = lremovexattr(path, "user.seen");
	result(rc == 0, "remove", "removexattr user.seen: %s", strerror(errno));
	errno = 0;
	value("user.seen");
	result(errno == ENODATA, "removed", "errno %d", errno);
}

static void host_verify(void)
{
	result(!strcmp(value(PREFIX "user.foo"), "bar"), "host-user-under-prefix", "'%s'",
	       value(PREFIX "user.foo"));
	result(!strcmp(value(PREFIX "trusted.t"), "x"), "host-trusted-under-prefix", "'%s'",
	       value(PREFIX "trusted.t"));
	errno = 0;
	value("user.foo");
	result(errno == ENODATA, "host-no-unprefixed-name", "errno %d", errno);
	errno = 0;
	value(PREFIX "user.seen");
	result(errno == ENODATA, "host-removed", "errno %d", errno);
	result(!strcmp(value("user.host"), "h"), "host-name-untouched", "'%s'", value("user.host"));
}

int main(int argc, char **argv)
{
	int host = argc == 3 && (!strcmp(argv[1], "--make") || !strcmp(argv[1], "--verify"));
	if (!host && argc != 2) {
		fprintf(stderr, "usage: xattr-probe [--make|--verify] DIR\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/f", argv[1 + host]);
	if (host && !strcmp(argv[1], "--make")) {
		FILE *f = fopen(path, "w");
		if (!f || fclose(f) || lsetxattr(path, "user.host", "h", 1, 0) ||
		    lsetxattr(path, PREFIX "user.seen", "s", 1, 0)) {
			perror("xattr-probe --make");
			return 2;
		}
		return 0;
	}
	if (host)
		host_verify();
	else
		guest_checks();
	return failed;
}
