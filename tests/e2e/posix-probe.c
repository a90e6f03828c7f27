/* POSIX conformance probe for a virtio-fs share; runs in the e2e guest (static binary).
 *
 *   posix-probe DIR            run every check in DIR/posix-probe (must not exist yet)
 *   posix-probe --sleep SECS FD  write a byte to FD, sleep; exit 42 on SIGUSR1 (what the
 *                                ETXTBSY checks execute from the share)
 *
 * Checks, each printed as "PASS: name" or "FAIL: name (details)":
 *   utimes   utimensat(AT_SYMLINK_NOFOLLOW) sets a symlink's own times and leaves its target's;
 *            following the link sets the target's; UTIME_OMIT/UTIME_NOW; O_PATH + AT_EMPTY_PATH;
 *            a dangling link; the results again after drop_caches (the host's state).
 *   etxtbsy  while a process executes a file on the share, opening it for writing (O_WRONLY,
 *            O_RDWR, O_RDONLY|O_TRUNC, O_WRONLY|O_TRUNC) and truncate() fail with ETXTBSY and
 *            leave it intact, also after a directory listing, a stat and drop_caches; the
 *            process survives and still runs code from the file (a signal handler); after it
 *            exits the file can be opened for writing again.
 *   seek     lseek(SEEK_DATA/SEEK_HOLE) on files with holes at the start, in the middle and at
 *            the end, around a punched hole, past EOF (ENXIO), at negative offsets (ENXIO),
 *            beyond 4 GiB and after an O_APPEND write; the file offset after a seek and after
 *            an ENXIO.
 * Exits with the number of failed checks. Build: gcc -O2 -static -o posix-probe posix-probe.c
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

static void drop_caches(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	sync();
	if (fd >= 0) {
		if (write(fd, "3", 1) != 1)
			perror("drop_caches");
		close(fd);
	}
}

/* ---- utimes on symlinks ----------------------------------------------------------------- */

static const struct timespec T0[2] = { { 1000000000, 100 }, { 1000000001, 200 } };
static const struct timespec T1[2] = { { 1100000000, 300 }, { 1100000001, 400 } };
static const struct timespec T2[2] = { { 1200000000, 500 }, { 1200000001, 600 } };

static int same(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/* Checks that PATH (lstat when nofollow) has atime AT and mtime MT. */
static void expect_times(const char *name, const char *path, int nofollow,
			 const struct timespec *at, const struct timespec *mt)
{
	struct stat st;
	int r = nofollow ? lstat(path, &st) : stat(path, &st);
	if (r != 0) {
		result(0, name, "%sstat %s: %s", nofollow ? "l" : "", path, strerror(errno));
		return;
	}
	result(same(&st.st_atim, at) && same(&st.st_mtim, mt), name,
	       "%s: atime %lld.%09ld mtime %lld.%09ld, want %lld.%09ld %lld.%09ld", path,
	       (long long)st.st_atim.tv_sec, st.st_atim.tv_nsec, (long long)st.st_mtim.tv_sec,
	       st.st_mtim.tv_nsec, (long long)at->tv_sec, at->tv_nsec, (long long)mt->tv_sec,
	       mt->tv_nsec);
}

/* The host's clock, as the mtime of a file created now in the current directory (the daemon
 * creates it; its times are the host's). Zero if it cannot be made. */
static struct timespec host_now(const char *name)
{
	struct timespec t = { 0, 0 };
	struct stat st;
	int fd = open(name, O_CREAT | O_EXCL | O_WRONLY, 0644);

	if (fd >= 0) {
		if (fstat(fd, &st) == 0)
			t = st.st_mtim;
		close(fd);
		unlink(name);
	}
	return t;
}

static void expect_ok(const char *name, int r)
{
	result(r == 0, name, "returned %d: %s", r, strerror(errno));
}

static void check_utimes(void)
{
	struct timespec t3[2] = { { 0, UTIME_OMIT }, { 1300000001, 700 } };
	struct timespec now[2] = { { 0, UTIME_NOW }, { 0, UTIME_NOW } };
	struct timespec before, after;
	struct stat st;
	int fd = open("target", O_CREAT | O_WRONLY, 0644);

	if (fd < 0 || close(fd) != 0 || symlink("target", "link") != 0 ||
	    symlink("missing", "dangling") != 0) {
		result(0, "utimes: setup", "%s", strerror(errno));
		return;
	}
	expect_ok("utimes: set target", utimensat(AT_FDCWD, "target", T0, 0));
	expect_ok("utimes: nofollow on symlink succeeds",
		  utimensat(AT_FDCWD, "link", T1, AT_SYMLINK_NOFOLLOW));
	expect_times("utimes: nofollow sets the symlink's times", "link", 1, &T1[0], &T1[1]);
	expect_times("utimes: nofollow leaves the target alone", "target", 0, &T0[0], &T0[1]);
	expect_ok("utimes: nofollow UTIME_OMIT atime",
		  utimensat(AT_FDCWD, "link", t3, AT_SYMLINK_NOFOLLOW));
	expect_times("utimes: UTIME_OMIT keeps the symlink's atime", "link", 1, &T1[0], &t3[1]);
	expect_times("utimes: UTIME_OMIT leaves the target alone", "target", 0, &T0[0], &T0[1]);
	drop_caches();
	expect_times("utimes: symlink times after drop_caches", "link", 1, &T1[0], &t3[1]);
	expect_times("utimes: target times after drop_caches", "target", 0, &T0[0], &T0[1]);
	expect_ok("utimes: following the symlink succeeds", utimensat(AT_FDCWD, "link", T2, 0));
	expect_times("utimes: following sets the target's times", "target", 0, &T2[0], &T2[1]);
	/* Following the link reads it, which may update its atime (relatime): mtime only. */
	if (lstat("link", &st) != 0)
		memset(&st, 0, sizeof(st));
	result(same(&st.st_mtim, &t3[1]),
	       "utimes: following leaves the symlink's mtime alone", "mtime %lld.%09ld",
	       (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);

	fd = open("link", O_PATH | O_NOFOLLOW);
	expect_ok("utimes: O_PATH fd + AT_EMPTY_PATH on symlink",
		  fd < 0 ? -1 : utimensat(fd, "", T0, AT_EMPTY_PATH));
	if (fd >= 0)
		close(fd);
	expect_times("utimes: AT_EMPTY_PATH sets the symlink's times", "link", 1, &T0[0], &T0[1]);
	expect_times("utimes: AT_EMPTY_PATH leaves the target alone", "target", 0, &T2[0],
		     &T2[1]);

	/* UTIME_NOW is the host's now (the daemon sets it): compare with the host's clock, read as
	 * the mtime of files created just before and after, not with the guest's, which a TCG
	 * guest under load can have seconds behind. */
	before = host_now("now-before");
	expect_ok("utimes: nofollow UTIME_NOW", utimensat(AT_FDCWD, "link", now, AT_SYMLINK_NOFOLLOW));
	after = host_now("now-after");
	if (lstat("link", &st) == 0) {
		int ok = st.st_mtim.tv_sec >= before.tv_sec - 1 && st.st_mtim.tv_sec <= after.tv_sec + 1 &&
			 st.st_atim.tv_sec >= before.tv_sec - 1 && st.st_atim.tv_sec <= after.tv_sec + 1;
		result(ok, "utimes: UTIME_NOW sets the symlink's times to now",
		       "mtime %lld, atime %lld, now %lld", (long long)st.st_mtim.tv_sec,
		       (long long)st.st_atim.tv_sec, (long long)after.tv_sec);
	} else {
		result(0, "utimes: UTIME_NOW sets the symlink's times to now", "%s", strerror(errno));
	}
	expect_times("utimes: UTIME_NOW leaves the target alone", "target", 0, &T2[0], &T2[1]);

	expect_ok("utimes: nofollow on a dangling symlink",
		  utimensat(AT_FDCWD, "dangling", T1, AT_SYMLINK_NOFOLLOW));
	expect_times("utimes: dangling symlink's times", "dangling", 1, &T1[0], &T1[1]);
	errno = 0;
	result(utimensat(AT_FDCWD, "dangling", T1, 0) == -1 && errno == ENOENT,
	       "utimes: following a dangling symlink fails with ENOENT", "errno %s",
	       strerror(errno));
}

/* ---- ETXTBSY ------------------------------------------------------------------------------ */

/* Copies /proc/self/exe to PATH as `cp -p` does (CREATE, WRITE, then SETATTR of owner, mode
 * 0755 and times). Returns its size. */
static off_t copy_self(const char *path)
{
	static char buf[65536];
	ssize_t n;
	off_t total = 0;
	struct stat st;
	int in = open("/proc/self/exe", O_RDONLY), out = open(path, O_CREAT | O_WRONLY | O_EXCL, 0700);

	if (in < 0 || out < 0 || fstat(in, &st) != 0)
		return -1;
	while ((n = read(in, buf, sizeof(buf))) > 0) {
		if (write(out, buf, n) != n)
			return -1;
		total += n;
	}
	struct timespec times[2] = { st.st_atim, st.st_mtim };
	if (n < 0 || fchown(out, st.st_uid, st.st_gid) != 0 || fchmod(out, 0755) != 0 ||
	    futimens(out, times) != 0 || close(out) != 0 || close(in) != 0)
		return -1;
	return total;
}

/* Whether the file at PATH has SIZE bytes equal to /proc/self/exe's. */
static int intact(const char *path, off_t size)
{
	static char a[65536], b[65536];
	struct stat st;
	int fa = open(path, O_RDONLY), fb = open("/proc/self/exe", O_RDONLY), ok = 1;
	ssize_t n;

	if (fa < 0 || fb < 0 || fstat(fa, &st) != 0 || st.st_size != size)
		ok = 0;
	while (ok && (n = read(fb, b, sizeof(b))) > 0)
		ok = read(fa, a, n) == n && memcmp(a, b, n) == 0;
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	return ok;
}

static void expect_open_txtbsy(const char *when, const char *path, int flags, const char *fname)
{
	char name[160];
	int fd;

	snprintf(name, sizeof(name), "etxtbsy: %s: open %s fails with ETXTBSY", when, fname);
	errno = 0;
	fd = open(path, flags);
	result(fd < 0 && errno == ETXTBSY, name, "fd %d, errno %s", fd, strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* The opens for writing that the guest kernel refuses before it asks the daemon. */
static void expect_txtbsy(const char *when, const char *path)
{
	char name[160];
	int r;

	expect_open_txtbsy(when, path, O_WRONLY, "O_WRONLY");
	expect_open_txtbsy(when, path, O_RDWR, "O_RDWR");
	expect_open_txtbsy(when, path, O_WRONLY | O_TRUNC, "O_WRONLY|O_TRUNC");
	snprintf(name, sizeof(name), "etxtbsy: %s: truncate fails with ETXTBSY", when);
	errno = 0;
	r = truncate(path, 0);
	result(r < 0 && errno == ETXTBSY, name, "returned %d, errno %s", r, strerror(errno));
	snprintf(name, sizeof(name), "etxtbsy: %s: open O_RDONLY succeeds", when);
	r = open(path, O_RDONLY);
	result(r >= 0, name, "%s", strerror(errno));
	if (r >= 0)
		close(r);
}

static void check_etxtbsy(void)
{
	const char *path = "exe";
	off_t size = copy_self(path);
	int errpipe[2], readypipe[2], status = 0, fd;
	char c, arg[16];
	pid_t pid;
	DIR *d;

	if (size <= 0 || pipe2(errpipe, O_CLOEXEC) != 0 || pipe(readypipe) != 0) {
		result(0, "etxtbsy: setup", "copy: %s", strerror(errno));
		return;
	}
	snprintf(arg, sizeof(arg), "%d", readypipe[1]);
	pid = fork();
	if (pid == 0) {
		close(errpipe[0]);
		close(readypipe[0]);
		execl(path, path, "--sleep", "60", arg, (char *)NULL);
		c = (char)errno;
		if (write(errpipe[1], &c, 1) != 1)
			_exit(126);
		_exit(127);
	}
	close(errpipe[1]);
	close(readypipe[1]);
	/* errpipe: EOF when the exec succeeded (CLOEXEC), else its errno; readypipe: one byte
	 * from the copy's main() once it runs. */
	if (pid < 0 || read(errpipe[0], &c, 1) != 0) {
		result(0, "etxtbsy: exec the copy on the share", "%s",
		       pid < 0 ? strerror(errno) : strerror(c));
		return;
	}
	close(errpipe[0]);
	result(read(readypipe[0], &c, 1) == 1, "etxtbsy: exec the copy on the share",
	       "it did not start");
	close(readypipe[0]);
	usleep(200 * 1000); /* into its sleep: a truncation would only hurt it when it wakes */
	expect_txtbsy("running", path);
	d = opendir(".");
	while (d && readdir(d))
		;
	if (d)
		closedir(d);
	expect_txtbsy("after readdir", path);
	drop_caches();
	expect_txtbsy("after drop_caches", path);
	/* Last: the daemon truncates at OPEN when it negotiated FUSE_ATOMIC_O_TRUNC, before the
	 * guest's ETXTBSY check of an O_RDONLY|O_TRUNC open. */
	expect_open_txtbsy("running", path, O_RDONLY | O_TRUNC, "O_RDONLY|O_TRUNC");
	/* A fresh GETATTR: a guest that learns of a truncation drops the program's pages. */
	struct statx stx = { 0 };
	int r = statx(AT_FDCWD, path, AT_STATX_FORCE_SYNC, STATX_SIZE, &stx);
	result(r == 0 && (off_t)stx.stx_size == size, "etxtbsy: the executable's size is unchanged",
	       "statx %d, size %lld, want %lld", r, (long long)stx.stx_size, (long long)size);
	result(intact(path, size), "etxtbsy: the executable is intact", "size or content changed");
	result(waitpid(pid, &status, WNOHANG) == 0, "etxtbsy: the running copy survives",
	       "exited, status %#x", status);
	/* Its SIGUSR1 handler runs code from the file (a truncated one dies of SIGBUS). */
	kill(pid, SIGUSR1);
	waitpid(pid, &status, 0);
	result(WIFEXITED(status) && WEXITSTATUS(status) == 42,
	       "etxtbsy: the running copy still runs its code", "status %#x", status);
	fd = open(path, O_WRONLY);
	result(fd >= 0, "etxtbsy: after exit, open O_WRONLY succeeds", "%s", strerror(errno));
	if (fd >= 0)
		close(fd);
}

/* ---- SEEK_DATA / SEEK_HOLE ------------------------------------------------------------------ */

#define K 1024LL
#define M (1024LL * K)
#define G (1024LL * M)

/* lseek(fd, off, whence) must give WANT (an offset, or -errno); on an error the file offset
 * must stay where it was, on success it must be the result. */
static void seek(const char *layout, int fd, off_t off, int whence, off_t want)
{
	char name[160];
	off_t before = lseek(fd, 12345, SEEK_SET), got, pos;

	snprintf(name, sizeof(name), "seek: %s: %s %lld", layout,
		 whence == SEEK_DATA ? "SEEK_DATA" : "SEEK_HOLE", (long long)off);
	errno = 0;
	got = lseek(fd, off, whence);
	if (got < 0)
		got = -errno;
	pos = lseek(fd, 0, SEEK_CUR);
	if (got != want) {
		result(0, name, "got %lld%s, want %lld%s", (long long)got,
		       got == -ENXIO ? " (ENXIO)" : got == -EINVAL ? " (EINVAL)" : "",
		       (long long)want, want == -ENXIO ? " (ENXIO)" : "");
	} else {
		result(pos == (got < 0 ? before : got), name, "file offset %lld afterwards",
		       (long long)pos);
	}
}

/* A fresh file NAME with data (64 KiB of 'x' per range) at each of the N offsets in DATA
 * and size SIZE. */
static int layout(const char *name, const off_t *data, int n, off_t size)
{
	static char buf[64 * 1024];
	int fd = open(name, O_CREAT | O_RDWR | O_EXCL, 0644);

	memset(buf, 'x', sizeof(buf));
	if (fd < 0 || ftruncate(fd, size) != 0)
		goto fail;
	for (int i = 0; i < n; i++)
		if (pwrite(fd, buf, sizeof(buf), data[i]) != (ssize_t)sizeof(buf))
			goto fail;
	return fd;
fail:
	result(0, name, "setup: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

static void check_seek(void)
{
	const int D = SEEK_DATA, H = SEEK_HOLE, X = -ENXIO;
	off_t d0[] = { 0 }, d1m[] = { 1 * M }, d_both[] = { 0, 1 * M };
	off_t d_big[] = { 0, 4 * G, 5 * G + 1 * M }, d_three[] = { 0, 64 * K, 128 * K };
	int fd;
	char buf[4096];

	if ((fd = layout("empty", NULL, 0, 0)) >= 0) {
		seek("empty", fd, 0, D, X);
		seek("empty", fd, 0, H, X);
		seek("empty", fd, 1, D, X);
		close(fd);
	}
	if ((fd = layout("data-only", d0, 1, 64 * K)) >= 0) {
		seek("data-only", fd, 0, D, 0);
		seek("data-only", fd, 100, D, 100);
		seek("data-only", fd, 0, H, 64 * K);
		seek("data-only", fd, 64 * K - 1, H, 64 * K);
		seek("data-only", fd, 64 * K, D, X);
		seek("data-only", fd, 64 * K, H, X);
		seek("data-only", fd, 1 * M, D, X);
		seek("data-only", fd, 1 * M, H, X);
		seek("data-only", fd, -1, D, X);
		seek("data-only", fd, -1, H, X);
		seek("data-only", fd, LLONG_MIN, D, X);
		seek("data-only", fd, LLONG_MIN, H, X);
		close(fd);
	}
	if ((fd = layout("hole-first", d1m, 1, 1 * M + 64 * K)) >= 0) {
		seek("hole-first", fd, 0, D, 1 * M);
		seek("hole-first", fd, 512 * K, D, 1 * M);
		seek("hole-first", fd, 0, H, 0);
		seek("hole-first", fd, 512 * K, H, 512 * K);
		seek("hole-first", fd, 1 * M + 100, D, 1 * M + 100);
		seek("hole-first", fd, 1 * M, H, 1 * M + 64 * K);
		seek("hole-first", fd, 1 * M + 64 * K, D, X);
		seek("hole-first", fd, 1 * M + 64 * K, H, X);
		close(fd);
	}
	if ((fd = layout("hole-last", d0, 1, 1 * M)) >= 0) {
		seek("hole-last", fd, 0, H, 64 * K);
		seek("hole-last", fd, 64 * K, D, X);
		seek("hole-last", fd, 64 * K, H, 64 * K);
		seek("hole-last", fd, 1 * M - 1, H, 1 * M - 1);
		seek("hole-last", fd, 1 * M - 1, D, X);
		seek("hole-last", fd, 1 * M, H, X);
		seek("hole-last", fd, 2 * M, D, X);
		close(fd);
	}
	if ((fd = layout("data-hole-data", d_both, 2, 1 * M + 64 * K)) >= 0) {
		seek("data-hole-data", fd, 64 * K, D, 1 * M);
		seek("data-hole-data", fd, 100 * K, D, 1 * M);
		seek("data-hole-data", fd, 64 * K, H, 64 * K);
		seek("data-hole-data", fd, 100 * K, H, 100 * K);
		seek("data-hole-data", fd, 1 * M, H, 1 * M + 64 * K);
		close(fd);
	}
	if ((fd = layout("beyond-4g", d_big, 3, 6 * G)) >= 0) {
		seek("beyond-4g", fd, 64 * K, D, 4 * G);
		seek("beyond-4g", fd, 4 * G + 100, D, 4 * G + 100);
		seek("beyond-4g", fd, 4 * G, H, 4 * G + 64 * K);
		seek("beyond-4g", fd, 4 * G + 64 * K, D, 5 * G + 1 * M);
		seek("beyond-4g", fd, 4 * G + 64 * K, H, 4 * G + 64 * K);
		seek("beyond-4g", fd, 5 * G + 1 * M, H, 5 * G + 1 * M + 64 * K);
		seek("beyond-4g", fd, 5 * G + 1 * M + 64 * K, D, X);
		seek("beyond-4g", fd, 6 * G - 1, H, 6 * G - 1);
		seek("beyond-4g", fd, 6 * G, H, X);
		seek("beyond-4g", fd, 7 * G, D, X);
		close(fd);
	}
	if ((fd = layout("punched", d_three, 3, 192 * K)) >= 0) {
		if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 64 * K, 64 * K) != 0) {
			result(0, "seek: punched: setup", "%s", strerror(errno));
		} else {
			seek("punched", fd, 0, H, 64 * K);
			seek("punched", fd, 64 * K, D, 128 * K);
			seek("punched", fd, 100 * K, H, 100 * K);
			seek("punched", fd, 128 * K, H, 192 * K);
		}
		close(fd);
	}
	if ((fd = layout("appended", d0, 1, 1 * M)) >= 0) {
		int afd = open("appended", O_WRONLY | O_APPEND);
		memset(buf, 'y', sizeof(buf));
		if (afd < 0 || write(afd, buf, sizeof(buf)) != (ssize_t)sizeof(buf) ||
		    write(afd, buf, sizeof(buf)) != (ssize_t)sizeof(buf)) {
			result(0, "seek: appended: setup", "%s", strerror(errno));
		} else {
			seek("appended", fd, 64 * K, D, 1 * M);
			seek("appended", fd, 1 * M, H, 1 * M + 8 * K);
			seek("appended", fd, 1 * M + 8 * K, D, X);
			seek("appended", afd, 64 * K, D, 1 * M);
			off_t end = lseek(fd, 0, SEEK_END);
			result(end == 1 * M + 8 * K, "seek: appended: SEEK_END", "got %lld",
			       (long long)end);
		}
		if (afd >= 0)
			close(afd);
		close(fd);
	}
}

static void on_usr1(int sig)
{
	_exit(sig == SIGUSR1 ? 42 : 1);
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--sleep") == 0) {
		signal(SIGUSR1, on_usr1);
		if (write(atoi(argv[3]), "r", 1) != 1)
			return 1;
		sleep(atoi(argv[2]));
		return 0;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR | --sleep SECS FD\n", argv[0]);
		return 2;
	}
	if (chdir(argv[1]) != 0 || mkdir("posix-probe", 0755) != 0 || chdir("posix-probe") != 0) {
		perror(argv[1]);
		return 2;
	}
	if (mkdir("utimes", 0755) == 0 && chdir("utimes") == 0) {
		check_utimes();
		chdir("..");
	}
	if (mkdir("etxtbsy", 0755) == 0 && chdir("etxtbsy") == 0) {
		check_etxtbsy();
		chdir("..");
	}
	if (mkdir("seek", 0755) == 0 && chdir("seek") == 0) {
		check_seek();
		chdir("..");
	}
	printf("posix-probe: %d passed, %d failed\n", passed, failed);
	return failed > 255 ? 255 : failed;
}
