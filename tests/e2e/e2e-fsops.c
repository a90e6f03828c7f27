/* Tiny syscall driver for the e2e tests (built static on the host, run in the busybox guest and
 * on the host). Each command makes exactly one syscall, so that a failure is reported as the
 * kernel returned it: busybox mv copies the file when rename(2) fails with EXDEV, and ln and
 * stat print only strerror() text.
 *
 *   e2e-fsops rename OLD NEW    rename(2)
 *   e2e-fsops link OLD NEW      link(2)
 *   e2e-fsops stat PATH         lstat(2); prints "OK dev=MAJ:MIN ino=N"
 *   e2e-fsops handle PATH       name_to_handle_at(2) (no AT_HANDLE_FID): can the fs encode handles
 *
 * Prints "OK" (exit 0) or "ERRNAME ERRNO strerror" (exit 1), e.g. "EXDEV 18 Invalid cross-device
 * link"; exit 2 on a usage error.
 *
 *   gcc -O2 -static -o e2e-fsops e2e-fsops.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static int report(int rc)
{
	if (rc == 0) {
		return 0;
	}
	int e = errno;
	const char *name = strerrorname_np(e);
	printf("%s %d %s\n", name ? name : "E?", e, strerror(e));
	return 1;
}

static int usage(void)
{
	fprintf(stderr, "usage: e2e-fsops rename|link OLD NEW | stat|handle PATH\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		return usage();
	}
	const char *cmd = argv[1];
	if (strcmp(cmd, "rename") == 0 || strcmp(cmd, "link") == 0) {
		if (argc != 4) {
			return usage();
		}
		int rc = cmd[0] == 'r' ? rename(argv[2], argv[3]) : link(argv[2], argv[3]);
		if (report(rc)) {
			return 1;
		}
		puts("OK");
		return 0;
	}
	if (argc != 3) {
		return usage();
	}
	if (strcmp(cmd, "stat") == 0) {
		struct stat st;
		if (report(lstat(argv[2], &st))) {
			return 1;
		}
		printf("OK dev=%u:%u ino=%llu\n", major(st.st_dev), minor(st.st_dev),
		       (unsigned long long)st.st_ino);
		return 0;
	}
	if (strcmp(cmd, "handle") == 0) {
		struct {
			struct file_handle fh;
			unsigned char buf[MAX_HANDLE_SZ];
		} h;
		int mnt_id;
		h.fh.handle_bytes = MAX_HANDLE_SZ;
		if (report(name_to_handle_at(AT_FDCWD, argv[2], &h.fh, &mnt_id, 0))) {
			return 1;
		}
		printf("OK type=%d bytes=%u mnt_id=%d\n", h.fh.handle_type, h.fh.handle_bytes, mnt_id);
		return 0;
	}
	return usage();
}
