/* mmap of direct-I/O files on a virtio-fs share (--cache=never, with and without --allow-mmap);
 * the `mmap-allow` and `mmap-deny` cases of run-all.sh. A static binary: it prepares and verifies
 * the share on the host and runs the checks in the guest.
 *
 *   mmap-probe --make MODE DIR    host, before boot: DIR/mmap-data (a pattern, 3 pages and 123
 *                                 bytes) and DIR/mmap-expect (MODE: allow or deny)
 *   mmap-probe MODE DIR           guest: the checks below on DIR/mmap-data
 *   mmap-probe --verify MODE DIR  host, after the guest: the file holds what the guest wrote
 *                                 through its shared mapping (allow) or is untouched (deny)
 *
 * Guest checks, each printed as "PASS: name" or "FAIL: name (details)":
 *   private-read     MAP_PRIVATE, PROT_READ of an O_RDONLY fd maps and reads the host's data
 *   private-cow      a write to a MAP_PRIVATE mapping stays in it: pread still reads the host's
 *   allow: shared-read   MAP_SHARED, PROT_READ of an O_RDONLY fd maps and reads the host's data
 *          shared-write  a store to a MAP_SHARED mapping of an O_RDWR fd, msync(MS_SYNC): a
 *                        pread through a new fd (direct I/O: from the host) reads it back
 *   deny:  shared-read-enodev, shared-write-enodev   the same mmap calls fail with ENODEV
 * Exits with the number of failed checks. Build: gcc -O2 -static -o mmap-probe mmap-probe.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIZE (3 * 4096 + 123)
#define MARK_AT (4096 + 10)
static const char MARK[] = "written through a shared mapping";

#include "probe.h"

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 131 + i / 4096 + 7);
}

/* The first offset where buf (len bytes from file offset 0) differs from the pattern, or -1. */
static long mismatch(const unsigned char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != pattern(i))
			return (long)i;
	return -1;
}

static char path[4096];

static int open_data(int flags)
{
	int fd = open(path, flags);
	if (fd < 0) {
		printf("cannot open %s: %s\n", path, strerror(errno));
		exit(100);
	}
	return fd;
}

/* Reads the whole file through a new fd. */
static void read_file(unsigned char *buf)
{
	int fd = open_data(O_RDONLY);
	ssize_t n = pread(fd, buf, SIZE, 0);
	close(fd);
	if (n != SIZE) {
		printf("pread %s: %zd (%s)\n", path, n, strerror(errno));
		exit(100);
	}
}

static void make(const char *dir, const char *mode)
{
	static unsigned char buf[SIZE];
	char expect[4096];
	FILE *f;
	for (size_t i = 0; i < SIZE; i++)
		buf[i] = pattern(i);
	f = fopen(path, "w");
	if (!f || fwrite(buf, 1, SIZE, f) != SIZE || fclose(f)) {
		perror(path);
		exit(2);
	}
	snprintf(expect, sizeof(expect), "%s/mmap-expect", dir);
	f = fopen(expect, "w");
	if (!f || fprintf(f, "%s\n", mode) < 0 || fclose(f)) {
		perror(expect);
		exit(2);
	}
}

/* mmap of the whole file with prot/flags through an fd opened with oflags; errno on failure. */
static void *map(int oflags, int prot, int flags, int *err)
{
	int fd = open_data(oflags);
	void *p = mmap(NULL, SIZE, prot, flags, fd, 0);
	*err = p == MAP_FAILED ? errno : 0;
	close(fd);
	return p;
}

static void private_checks(void)
{
	static unsigned char buf[SIZE];
	int err;
	unsigned char *p = map(O_RDONLY, PROT_READ, MAP_PRIVATE, &err);
	if (p == MAP_FAILED) {
		result(0, "private-read", "mmap: %s", strerror(err));
	} else {
		long at = mismatch(p, SIZE);
		result(at < 0, "private-read", "differs from the host's data at %ld", at);
		munmap(p, SIZE);
	}
	p = map(O_RDONLY, PROT_READ | PROT_WRITE, MAP_PRIVATE, &err);
	if (p == MAP_FAILED) {
		result(0, "private-cow", "mmap: %s", strerror(err));
		return;
	}
	memcpy(p + MARK_AT, MARK, sizeof(MARK));
	read_file(buf);
	long at = mismatch(buf, SIZE);
	result(at < 0 && memcmp(p + MARK_AT, MARK, sizeof(MARK)) == 0, "private-cow",
	       "file differs from the host's data at %ld after a private store", at);
	munmap(p, SIZE);
}

static void allow_checks(void)
{
	static unsigned char buf[SIZE];
	int err;
	unsigned char *p = map(O_RDONLY, PROT_READ, MAP_SHARED, &err);
	if (p == MAP_FAILED) {
		result(0, "shared-read", "mmap: %s", strerror(err));
	} else {
		long at = mismatch(p, SIZE);
		result(at < 0, "shared-read", "differs from the host's data at %ld", at);
		munmap(p, SIZE);
	}
	p = map(O_RDWR, PROT_READ | PROT_WRITE, MAP_SHARED, &err);
	if (p == MAP_FAILED) {
		result(0, "shared-write", "mmap: %s", strerror(err));
		return;
	}
	memcpy(p + MARK_AT, MARK, sizeof(MARK));
	if (msync(p, SIZE, MS_SYNC) != 0) {
		result(0, "shared-write", "msync: %s", strerror(errno));
		munmap(p, SIZE);
		return;
	}
	munmap(p, SIZE);
	read_file(buf);
	result(memcmp(buf + MARK_AT, MARK, sizeof(MARK)) == 0 && mismatch(buf, MARK_AT) < 0,
	       "shared-write", "pread after msync reads %.32s", (const char *)buf + MARK_AT);
}

static void deny_checks(void)
{
	int err;
	void *p = map(O_RDONLY, PROT_READ, MAP_SHARED, &err);
	result(p == MAP_FAILED && err == ENODEV, "shared-read-enodev", "mmap: %s",
	       p == MAP_FAILED ? strerror(err) : "mapped");
	if (p != MAP_FAILED)
		munmap(p, SIZE);
	p = map(O_RDWR, PROT_READ | PROT_WRITE, MAP_SHARED, &err);
	result(p == MAP_FAILED && err == ENODEV, "shared-write-enodev", "mmap: %s",
	       p == MAP_FAILED ? strerror(err) : "mapped");
	if (p != MAP_FAILED)
		munmap(p, SIZE);
}

/* Host side after the guest: the guest's shared store (allow) and nothing else reached it. */
static void verify(const char *mode)
{
	static unsigned char buf[SIZE];
	int allow = strcmp(mode, "allow") == 0;
	read_file(buf);
	if (allow)
		result(memcmp(buf + MARK_AT, MARK, sizeof(MARK)) == 0, "host-has-shared-store",
		       "host file reads %.32s at %d", (const char *)buf + MARK_AT, MARK_AT);
	if (allow)
		memset(buf + MARK_AT, 0, sizeof(MARK));
	for (size_t i = 0; i < SIZE; i++) {
		int marked = allow && i >= MARK_AT && i < MARK_AT + sizeof(MARK);
		if (!marked && buf[i] != pattern(i)) {
			result(0, "host-rest-intact", "differs at %zu", i);
			return;
		}
	}
	result(1, "host-rest-intact", "%s", "");
}

int main(int argc, char **argv)
{
	int host = argc == 4 && (!strcmp(argv[1], "--make") || !strcmp(argv[1], "--verify"));
	const char *mode, *dir;
	if (!host && argc != 3) {
		fprintf(stderr, "usage: mmap-probe [--make|--verify] allow|deny DIR\n");
		return 2;
	}
	mode = argv[1 + host];
	dir = argv[2 + host];
	if (strcmp(mode, "allow") && strcmp(mode, "deny")) {
		fprintf(stderr, "mmap-probe: MODE is allow or deny, not %s\n", mode);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/mmap-data", dir);
	if (host && !strcmp(argv[1], "--make")) {
		make(dir, mode);
		return 0;
	}
	if (host) {
		verify(mode);
		return failed;
	}
	private_checks();
	if (!strcmp(mode, "allow"))
		allow_checks();
	else
		deny_checks();
	return failed;
}
