/* setuid/setgid clearing with --killpriv-v2: the `killpriv` case of run-all.sh. A guest user
 * (uid 1000, gid 1000, no supplementary groups, no capabilities) writes to, truncates (by path
 * and through an fd), opens with O_TRUNC and chgrps setuid and setgid files; guest root writes
 * and truncates some too. The bits must end as Linux leaves them: checked against a fixed table
 * (setuid always cleared for the user; setgid cleared when group-executable or when the user is
 * not in the file's group; nothing cleared for root) and against the same operations on the
 * guest's own tmpfs, in the guest and on the host. A file with security.capability loses it.
 * A static binary: it prepares and verifies the share on the host and runs the guest part.
 *
 *   killpriv-probe --make DIR            host, before boot: the files, owned by 1000
 *   killpriv-probe DIR                   guest: the operations, then the modes in the guest
 *   killpriv-probe --verify [LOG] DIR    host, after the guest: the modes on the host, the
 *                                        capability gone; LOG: the vhostfs daemon log, whose
 *                                        INIT answer must carry FUSE_HANDLE_KILLPRIV_V2
 *
 * Exits with the number of failed checks. Build: gcc -O2 -static -o killpriv-probe killpriv-probe.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "probe.h"

#define USER 1000
#define OTHER_GROUP 2000
#define REF "/tmp/killpriv-ref"
#define FUSE_HANDLE_KILLPRIV_V2 (1u << 28)

enum op { WRITE, TRUNCATE, FTRUNCATE, OPEN_TRUNC, CHGRP, ROOT_WRITE, ROOT_TRUNCATE };
static const char *const op_names[] = { "write", "truncate", "ftruncate", "open-trunc", "chgrp",
					"root-write", "root-truncate" };

struct kind {
	const char *name;
	mode_t mode;
	gid_t gid;
};
static const struct kind kinds[] = {
	{ "setuid", 04755, USER },
	{ "setgid", 02755, USER },
	{ "setgid-noexec", 02745, USER },
	{ "setgid-noexec-other", 02745, OTHER_GROUP },
	{ "both", 06755, USER },
	{ "plain", 0755, USER },
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))
#define NOPS (sizeof(op_names) / sizeof(op_names[0]))

/* What Linux leaves of the kind's mode after `op`. */
static mode_t expected(enum op op, const struct kind *k)
{
	if (op == ROOT_WRITE || op == ROOT_TRUNCATE)
		return k->mode; /* CAP_FSETID */
	mode_t m = k->mode & ~S_ISUID;
	if ((k->mode & S_IXGRP) || k->gid != USER)
		m &= ~S_ISGID;
	return m;
}

static void file_name(char *buf, size_t len, const char *dir, enum op op, const struct kind *k)
{
	snprintf(buf, len, "%s/%s-%s", dir, op_names[op], k->name);
}

/* DIR's files for every (op, kind), and "cap" with security.capability; 0 on success. */
static int make(const char *dir)
{
	char p[4096];
	for (unsigned o = 0; o < NOPS; o++)
		for (unsigned i = 0; i < NKINDS; i++) {
			file_name(p, sizeof(p), dir, o, &kinds[i]);
			int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			if (fd < 0 || write(fd, "0123456789", 10) != 10 || close(fd) ||
			    chown(p, USER, kinds[i].gid) || chmod(p, kinds[i].mode)) {
				perror(p);
				return 1;
			}
		}
	/* vfs_cap_data revision 2: cap_net_raw permitted and effective. */
	static const unsigned char caps[20] = { 1, 0, 0, 2, 0, 0x20 };
	snprintf(p, sizeof(p), "%s/cap", dir);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	if (fd < 0 || close(fd) || chown(p, USER, USER) ||
	    setxattr(p, "security.capability", caps, sizeof(caps), 0)) {
		perror(p);
		return 1;
	}
	return 0;
}

/* `op` on `path`, as the current user; 0 or an errno. */
static int apply(enum op op, const char *path)
{
	int fd, rc = 0;
	switch (op) {
	case WRITE:
	case ROOT_WRITE:
		fd = open(path, O_WRONLY);
		if (fd < 0)
			return errno;
		if (pwrite(fd, "abc", 3, 2) != 3)
			rc = errno;
		close(fd);
		return rc;
	case TRUNCATE:
	case ROOT_TRUNCATE:
		return truncate(path, 4) ? errno : 0;
	case FTRUNCATE:
		fd = open(path, O_WRONLY);
		if (fd < 0)
			return errno;
		if (ftruncate(fd, 4))
			rc = errno;
		close(fd);
		return rc;
	case OPEN_TRUNC:
		fd = open(path, O_WRONLY | O_TRUNC);
		if (fd < 0)
			return errno;
		close(fd);
		return 0;
	case CHGRP:
		return chown(path, -1, USER) ? errno : 0;
	}
	return EINVAL;
}

/* Runs the user's operations on `dir` in a child with uid/gid 1000 and no capabilities; the
 * operations that fail are reported by name. */
static void as_user(const char *dir, const char *where)
{
	pid_t pid = fork();
	if (pid == 0) {
		if (setgroups(0, NULL) || setgid(USER) || setuid(USER))
			_exit(99);
		int bad = 0;
		char p[4096];
		for (unsigned o = WRITE; o <= CHGRP; o++)
			for (unsigned i = 0; i < NKINDS; i++) {
				file_name(p, sizeof(p), dir, o, &kinds[i]);
				int e = apply(o, p);
				if (e) {
					printf("FAIL: %s %s as uid 1000 (%s)\n", where, p, strerror(e));
					bad++;
				}
			}
		snprintf(p, sizeof(p), "%s/cap", dir);
		int e = apply(WRITE, p);
		if (e) {
			printf("FAIL: write %s as uid 1000 (%s)\n", p, strerror(e));
			bad++;
		}
		fflush(stdout);
		_exit(bad);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	result(WIFEXITED(st) && WEXITSTATUS(st) == 0, where, "status %#x", st);
}

static mode_t mode_of(const char *path)
{
	struct stat st;
	return stat(path, &st) ? (mode_t)-1 : st.st_mode & 07777;
}

static void check_modes(const char *dir, const char *who, int with_ref)
{
	char p[4096], r[4096], name[128];
	for (unsigned o = 0; o < NOPS; o++)
		for (unsigned i = 0; i < NKINDS; i++) {
			file_name(p, sizeof(p), dir, o, &kinds[i]);
			mode_t want = expected(o, &kinds[i]), got = mode_of(p);
			snprintf(name, sizeof(name), "%s-%s-%s", who, op_names[o], kinds[i].name);
			result(got == want, name, "mode %o, want %o (from %o)", got, want,
			       kinds[i].mode);
			if (with_ref) {
				file_name(r, sizeof(r), REF, o, &kinds[i]);
				snprintf(name, sizeof(name), "as-tmpfs-%s-%s", op_names[o],
					 kinds[i].name);
				result(got == mode_of(r), name, "virtio-fs %o, tmpfs %o", got,
				       mode_of(r));
			}
		}
}

static void guest(const char *dir)
{
	/* The initramfs root comes from a private staging directory (0700): let the user through
	 * to /mnt and /tmp. */
	if (chmod("/", 0755))
		result(0, "chmod-root", "%s", strerror(errno));
	if (mkdir(REF, 0755) || make(REF)) {
		result(0, "reference-files", "%s", strerror(errno));
		return;
	}
	as_user(dir, "virtio-fs-ops");
	as_user(REF, "tmpfs-ops");
	char p[4096];
	for (unsigned o = ROOT_WRITE; o <= ROOT_TRUNCATE; o++)
		for (unsigned i = 0; i < NKINDS; i++) {
			file_name(p, sizeof(p), dir, o, &kinds[i]);
			int e = apply(o, p);
			result(e == 0, p, "%s as root: %s", op_names[o], strerror(e));
			file_name(p, sizeof(p), REF, o, &kinds[i]);
			apply(o, p);
		}
	check_modes(dir, "guest", 1);
}

/* The INIT answer vhostfs logs ("answered 7.N flags 0x../0x..") has FUSE_HANDLE_KILLPRIV_V2. */
static void check_log(const char *log)
{
	FILE *f = fopen(log, "r");
	char line[1024];
	unsigned minor, flags = 0;
	int found = 0;
	while (f && fgets(line, sizeof(line), f)) {
		char *a = strstr(line, "answered 7.");
		if (a && sscanf(a, "answered 7.%u flags %x", &minor, &flags) == 2)
			found = 1;
	}
	if (f)
		fclose(f);
	result(found && (flags & FUSE_HANDLE_KILLPRIV_V2), "init-answer-has-killpriv-v2",
	       "%s: %s, flags %#x", log, found ? "found" : "no INIT answer logged", flags);
}

int main(int argc, char **argv)
{
	const char *dir = argv[argc - 1];
	if (argc == 3 && !strcmp(argv[1], "--make"))
		return make(dir) ? 2 : 0;
	if (argc >= 3 && argc <= 4 && !strcmp(argv[1], "--verify")) {
		check_modes(dir, "host", 0);
		char p[4096];
		snprintf(p, sizeof(p), "%s/cap", dir);
		errno = 0;
		result(getxattr(p, "security.capability", NULL, 0) < 0 && errno == ENODATA,
		       "host-capability-cleared-by-write", "errno %d", errno);
		if (argc == 4)
			check_log(argv[2]);
		else
			printf("note: daemon log not given, negotiation not checked\n");
		return failed;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: killpriv-probe [--make|--verify [LOG]] DIR\n");
		return 2;
	}
	guest(dir);
	return failed;
}
