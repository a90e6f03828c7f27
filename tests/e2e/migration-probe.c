/* The guest's I/O across a live migration (tests/e2e/migration.sh). A static binary: it prepares
 * and verifies the share on the host and runs the I/O in the guest.
 *
 *   migration-probe --make EXPECT DIR   host, before boot: DIR/read.dat and DIR/victim.dat (patterns),
 *                                       DIR/migration-expect (EXPECT: victim-ok or victim-eio)
 *   migration-probe DIR                 guest: the I/O and the checks below
 *   migration-probe --verify DIR        host, after the guest: DIR/written.log holds lines 0..N-1,
 *                                       each once and in order, N being DIR/written.count
 *   migration-probe --lines DIR         host: the number of complete lines in DIR/written.log
 *
 * In the guest three processes run until DIR/stop appears (the host creates it a while after the
 * switch-over), each keeping its file open the whole time:
 *   writer   appends "%08u\n" (a counter) to DIR/written.log every 5 ms (O_APPEND, one write each)
 *   reader   reads DIR/read.dat (O_DIRECT: every read reaches the daemon) into a poisoned buffer
 *            and checks it against the pattern (a page the daemon wrote during the migration but
 *            QEMU did not see dirty would arrive stale on the destination)
 *   victim   the same on DIR/victim.dat, which the host renames during the migration in the
 *            victim-eio case: its reads must then fail with EIO and only its reads
 * "E2E-MIGRATION-READY" on the console says all three have done I/O (the host then migrates).
 * Checks, each printed as "PASS: name" or "FAIL: name (details)":
 *   writer-no-error, reader-no-error  no error, no short or wrong read, and both went on until stop
 *   victim-no-error (victim-ok)   or  victim-eio (victim-eio: reads worked, then failed with EIO)
 *   written-lines                 the guest reads written.log back: every line exactly once
 * Exits with the number of failed checks. Build: gcc -O2 -static -o migration-probe migration-probe.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe.h"

#define READ_SIZE (256 * 1024)
#define VICTIM_SIZE (64 * 1024)
#define WRITE_EVERY_US 5000

static unsigned char pattern(size_t i, unsigned seed)
{
	return (unsigned char)(i * 131 + i / 4096 + seed);
}

static char dir[2048];

static const char *at(const char *name)
{
	static char buf[4][4096];
	static int n;
	char *p = buf[n++ % 4];
	snprintf(p, 4096, "%s/%s", dir, name);
	return p;
}

static int make_file(const char *name, size_t size, unsigned seed)
{
	unsigned char *b = malloc(size);
	int fd = open(at(name), O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (!b || fd < 0)
		return -1;
	for (size_t i = 0; i < size; i++)
		b[i] = pattern(i, seed);
	int ok = write(fd, b, size) == (ssize_t)size;
	free(b);
	return close(fd) == 0 && ok ? 0 : -1;
}

/* Counts the lines of written.log; returns the first bad line number (-1: none) in *bad. */
static long scan_lines(long *bad, char *why, size_t whylen)
{
	FILE *f = fopen(at("written.log"), "r");
	char line[64];
	long n = 0;
	*bad = -1;
	if (!f) {
		snprintf(why, whylen, "open written.log: %s", strerror(errno));
		*bad = 0;
		return 0;
	}
	while (fgets(line, sizeof(line), f)) {
		char want[24];
		snprintf(want, sizeof(want), "%08ld\n", n);
		if (*bad < 0 && strcmp(line, want) != 0) {
			*bad = n;
			line[strcspn(line, "\n")] = 0;
			snprintf(why, whylen, "line %ld is \"%s\", expected %08ld", n + 1, line, n);
		}
		n++;
	}
	fclose(f);
	return n;
}

/* One process's outcome, sent to the parent through a pipe. */
struct outcome {
	long ops;      /* successful writes or reads */
	int err;       /* errno of the first failure, 0: none; -1: wrong data or short */
	long err_at;   /* ops done before that failure */
	long errors;   /* failed operations */
	int other_err; /* victim: a failure other than EIO after the first EIO */
};

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

static void run_writer(struct outcome *o)
{
	int fd = open(at("written.log"), O_WRONLY | O_APPEND | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		o->err = errno;
		return;
	}
	while (!stop) {
		char line[24];
		int len = snprintf(line, sizeof(line), "%08ld\n", o->ops);
		ssize_t r = write(fd, line, len);
		if (r != len) {
			if (!o->errors)
				o->err = r < 0 ? errno : -1, o->err_at = o->ops;
			o->errors++;
			break; /* a lost or torn line: the count cannot go on */
		}
		o->ops++;
		usleep(WRITE_EVERY_US);
	}
	if (close(fd) != 0 && !o->errors)
		o->err = errno, o->errors++;
}

static void run_reader(const char *name, size_t size, unsigned seed, int tolerate_eio,
		       struct outcome *o)
{
	unsigned char *b;
	int fd = open(at(name), O_RDONLY | O_DIRECT);
	if (fd < 0 || posix_memalign((void **)&b, 4096, size) != 0) {
		o->err = errno;
		return;
	}
	while (!stop) {
		memset(b, 0xa5, size);
		ssize_t r = pread(fd, b, size, 0);
		int bad = r != (ssize_t)size;
		for (size_t i = 0; !bad && i < size; i++)
			bad = b[i] != pattern(i, seed);
		if (bad) {
			int e = r < 0 ? errno : -1;
			if (!o->errors)
				o->err = e, o->err_at = o->ops;
			else if (tolerate_eio && e != o->err)
				o->other_err = e;
			o->errors++;
			if (!tolerate_eio || e != EIO)
				break;
		} else if (o->errors) {
			o->other_err = -2; /* worked again after failing */
		} else {
			o->ops++;
		}
		usleep(2000);
	}
	close(fd);
}

static const char *err_name(int e)
{
	return e == -1 ? "short or wrong data" : e == -2 ? "worked again" : strerror(e);
}

static int guest(void)
{
	char expect[32] = "";
	FILE *f = fopen(at("migration-expect"), "r");
	if (!f || !fgets(expect, sizeof(expect), f)) {
		printf("FAIL: read %s\n", at("migration-expect"));
		return 1;
	}
	fclose(f);
	expect[strcspn(expect, "\n")] = 0;
	int victim_eio = strcmp(expect, "victim-eio") == 0;
	printf("== migration probe on %s (expect %s) ==\n", dir, expect);
	fflush(stdout);

	const char *names[3] = { "writer", "reader", "victim" };
	pid_t pids[3];
	int fds[3];
	for (int k = 0; k < 3; k++) {
		int p[2];
		if (pipe(p) != 0)
			return 1;
		pids[k] = fork();
		if (pids[k] == 0) {
			struct outcome o = { 0 };
			signal(SIGTERM, on_term);
			close(p[0]);
			if (k == 0)
				run_writer(&o);
			else if (k == 1)
				run_reader("read.dat", READ_SIZE, 7, 0, &o);
			else
				run_reader("victim.dat", VICTIM_SIZE, 11, victim_eio, &o);
			/* A process whose loop ended early waits for the stop like the others. */
			while (!stop)
				pause();
			if (write(p[1], &o, sizeof(o)) != sizeof(o))
				_exit(2);
			_exit(0);
		}
		close(p[1]);
		fds[k] = p[0];
	}
	/* Ready once the writer has written a few lines (the readers start as fast). */
	for (int i = 0; i < 2000; i++) {
		struct stat st;
		if (stat(at("written.log"), &st) == 0 && st.st_size >= 5 * 9)
			break;
		usleep(10000);
	}
	printf("E2E-MIGRATION-READY\n");
	fflush(stdout);
	for (;;) {
		struct stat st;
		if (stat(at("stop"), &st) == 0)
			break;
		usleep(50000);
	}
	struct outcome o[3];
	for (int k = 0; k < 3; k++) {
		kill(pids[k], SIGTERM);
		if (read(fds[k], &o[k], sizeof(o[k])) != sizeof(o[k])) {
			printf("FAIL: %s (no outcome)\n", names[k]);
			return 1;
		}
		waitpid(pids[k], NULL, 0);
		printf("%s: %ld ops, %ld errors\n", names[k], o[k].ops, o[k].errors);
	}
	result(!o[0].errors && o[0].ops > 0, "writer-no-error", "%s after %ld lines",
	       err_name(o[0].err), o[0].err_at);
	result(!o[1].errors && o[1].ops > 0, "reader-no-error", "%s after %ld reads",
	       err_name(o[1].err), o[1].err_at);
	if (victim_eio)
		result(o[2].errors > 0 && o[2].err == EIO && o[2].err_at > 0 && !o[2].other_err,
		       "victim-eio", "%ld good reads, then %ld errors, first %s, other %s",
		       o[2].err_at, o[2].errors, o[2].errors ? err_name(o[2].err) : "none",
		       o[2].other_err ? err_name(o[2].other_err) : "none");
	else
		result(!o[2].errors && o[2].ops > 0, "victim-no-error", "%s after %ld reads",
		       err_name(o[2].err), o[2].err_at);
	/* What the guest reads back from the daemon, not from its page cache. */
	int fd = open(at("written.log"), O_RDONLY);
	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	char why[160] = "";
	long bad, n = scan_lines(&bad, why, sizeof(why));
	result(bad < 0 && n == o[0].ops, "written-lines", "%ld lines for %ld writes; %s", n,
	       o[0].ops, why);
	f = fopen(at("written.count"), "w");
	if (!f || fprintf(f, "%ld\n", o[0].ops) < 0 || fclose(f) != 0)
		result(0, "write written.count", "%s", strerror(errno));
	return failed;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--make") == 0) {
		snprintf(dir, sizeof(dir), "%s", argv[3]);
		FILE *f = fopen(at("migration-expect"), "w");
		if (!f || fprintf(f, "%s\n", argv[2]) < 0 || fclose(f) != 0 ||
		    make_file("read.dat", READ_SIZE, 7) || make_file("victim.dat", VICTIM_SIZE, 11)) {
			perror("migration-probe --make");
			return 1;
		}
		return 0;
	}
	if (argc == 3 && (strcmp(argv[1], "--verify") == 0 || strcmp(argv[1], "--lines") == 0)) {
		snprintf(dir, sizeof(dir), "%s", argv[2]);
		char why[160] = "";
		long bad, n = scan_lines(&bad, why, sizeof(why));
		if (strcmp(argv[1], "--lines") == 0) {
			printf("%ld\n", n);
			return 0;
		}
		long want = -1;
		FILE *f = fopen(at("written.count"), "r");
		if (!f || fscanf(f, "%ld", &want) != 1)
			want = -1;
		if (f)
			fclose(f);
		result(bad < 0 && n == want && n > 0, "host: written.log",
		       "%ld lines, the guest wrote %ld; %s", n, want, why);
		return failed;
	}
	if (argc == 2) {
		snprintf(dir, sizeof(dir), "%s", argv[1]);
		return guest();
	}
	fprintf(stderr, "usage: migration-probe --make EXPECT DIR | DIR | --verify DIR | --lines DIR\n");
	return 2;
}
