/* Data-integrity exerciser for a virtio-fs share mounted with writeback caching (the `writeback`
 * case of run-all.sh, daemon run with --writeback). A static binary: it prepares the share on
 * the host, runs the workers in the guest, and verifies the files on the host afterwards.
 *
 *   writeback-probe --make DIR     host, before boot: DIR/wb-seed (the run's random seed),
 *                                  DIR/wb-download (DOWNLOAD_START bytes) and a background
 *                                  process that grows it to DOWNLOAD_SIZE once the guest has
 *                                  touched it (DIR/wb-touched), then writes DIR/wb-host-done
 *   writeback-probe run DIR        guest: the workers below, then the checks after a cache drop
 *   writeback-probe --verify DIR   host, after the guest unmounted: every file as the model says,
 *                                  with the sizes and mtimes the guest saw
 *
 * Each of WORKERS processes owns a private file (wb-private-N) and the byte range
 * [N*RANGE, (N+1)*RANGE) of one shared file (wb-shared; RANGE is not a multiple of the page
 * size, so neighbours share pages). Every operation is drawn from a PRNG seeded by the run's
 * seed and the worker number, and applied to an in-memory model too, so the expected content
 * can be replayed anywhere without I/O (the guest's final check and the host's use that).
 * Operations: pwrite through an O_WRONLY fd (partial pages: the guest must READ them through a
 * write-only handle), append through an O_WRONLY|O_APPEND fd, ftruncate up and down, pread
 * checked against the model, a MAP_SHARED store (msync sometimes) and a read through a
 * mapping, fsync/fdatasync, and closing and reopening the fds. The shared file is only written
 * in the worker's range and never truncated.
 *
 * First, Proxmox VE's truncated files (docs/writeback.md): the guest stats, reads and touches
 * wb-download while the host is still writing it, the host finishes, and after the entry
 * timeout the guest must see the whole file (download-size, download-content) and keep it
 * whole through a rename (download-renamed); a guest that keeps its first inode sees
 * DOWNLOAD_START bytes forever.
 *
 * Guest checks ("PASS: name" / "FAIL: name (details)"): each worker's reads matched the model
 * (worker-N), then after all exited and `echo 3 > drop_caches` (the guest re-reads from the
 * host): sizes, contents and mtimes as before the drop (after-drop-*). The guest writes the
 * sizes and mtimes it saw to DIR/wb-seen for the host. Exits with the number of failed checks.
 * Build: gcc -O2 -static -o writeback-probe writeback-probe.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe.h"

#define WORKERS 4
#define OPS 1500
#define MAX_PRIVATE (768 * 1024)
#define MAX_IO (24 * 1024)
#define RANGE 20011
#define SHARED_SIZE (WORKERS * RANGE)

static char dir[4096];

struct model {
	unsigned char *priv; /* MAX_PRIVATE bytes, `size` of them valid */
	size_t size;
	unsigned char *shared; /* SHARED_SIZE bytes; the worker's range is its own */
};

struct fds {
	int w, append, r, shared_w, shared_r;
};

static uint64_t next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ULL;
}

static uint64_t below(uint64_t *s, uint64_t n)
{
	return n ? next(s) % n : 0;
}

static unsigned char data_byte(uint64_t tag, size_t pos)
{
	return (unsigned char)(tag ^ (pos * 0x9d) ^ (pos >> 9));
}

static void fill(unsigned char *buf, size_t len, uint64_t tag, size_t at)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = data_byte(tag, at + i);
}

static void name_of(char *out, size_t n, const char *base, int w)
{
	if (w < 0)
		snprintf(out, n, "%s/%s", dir, base);
	else
		snprintf(out, n, "%s/%s-%d", dir, base, w);
}

static void die(const char *what)
{
	printf("FAIL: %s (%s)\n", what, strerror(errno));
	fflush(stdout);
	exit(100);
}

static int open_as(const char *base, int w, int flags)
{
	char p[4200];
	name_of(p, sizeof(p), base, w);
	int fd = open(p, flags | O_CLOEXEC, 0644);
	if (fd < 0)
		die(p);
	return fd;
}

static void open_all(struct fds *f, int w)
{
	f->w = open_as("wb-private", w, O_WRONLY | O_CREAT);
	f->append = open_as("wb-private", w, O_WRONLY | O_APPEND);
	f->r = open_as("wb-private", w, O_RDONLY);
	f->shared_w = open_as("wb-shared", -1, O_WRONLY);
	f->shared_r = open_as("wb-shared", -1, O_RDONLY);
}

static void close_all(struct fds *f)
{
	close(f->w);
	close(f->append);
	close(f->r);
	close(f->shared_w);
	close(f->shared_r);
}

static void full_write(int fd, const unsigned char *buf, size_t len, off_t off, const char *what)
{
	while (len) {
		ssize_t n = off < 0 ? write(fd, buf, len) : pwrite(fd, buf, len, off);
		if (n <= 0)
			die(what);
		buf += n;
		len -= (size_t)n;
		if (off >= 0)
			off += n;
	}
}

/* Compares len bytes read from fd at off with want; prints the first difference. */
static int check_read(int fd, const unsigned char *want, size_t len, off_t off, const char *what)
{
	static unsigned char got[1024 * 1024]; /* MAX_PRIVATE, and DOWNLOAD_SIZE */
	size_t done = 0;
	if (len > sizeof(got)) {
		printf("%s: %zu bytes is more than the probe reads at once\n", what, len);
		return 0;
	}
	while (done < len) {
		ssize_t n = pread(fd, got + done, len - done, off + (off_t)done);
		if (n < 0)
			die(what);
		if (n == 0)
			break;
		done += (size_t)n;
	}
	if (done != len) {
		printf("%s: short read at %lld: %zu of %zu bytes\n", what, (long long)off, done, len);
		return 0;
	}
	for (size_t i = 0; i < len; i++)
		if (got[i] != want[i]) {
			printf("%s: byte %lld is %#x, expected %#x\n", what, (long long)off + (long long)i,
			       got[i], want[i]);
			return 0;
		}
	return 1;
}

/* One worker's operations; with io == 0 only the model is updated (the replay). Returns the
 * number of mismatches seen (always 0 for the replay). */
static int run_worker(int w, uint64_t seed, struct model *m, int io)
{
	uint64_t s = seed ^ (0x51ed2701ULL * (uint64_t)(w + 1));
	static unsigned char buf[MAX_IO];
	size_t lo = (size_t)w * RANGE;
	struct fds f;
	int bad = 0;
	char what[64];

	for (int i = 0; i < 20; i++)
		next(&s);
	if (io)
		open_all(&f, w);
	for (int op = 0; op < OPS; op++) {
		uint64_t kind = below(&s, 100), tag = next(&s);
		snprintf(what, sizeof(what), "worker %d op %d", w, op);
		if (kind < 30) { /* pwrite in the private file */
			size_t len = 1 + below(&s, MAX_IO), off = below(&s, MAX_PRIVATE - len);
			fill(buf, len, tag, off);
			if (io)
				full_write(f.w, buf, len, (off_t)off, what);
			if (off > m->size)
				memset(m->priv + m->size, 0, off - m->size);
			memcpy(m->priv + off, buf, len);
			if (off + len > m->size)
				m->size = off + len;
		} else if (kind < 38) { /* append */
			size_t len = 1 + below(&s, MAX_IO / 4);
			if (m->size + len > MAX_PRIVATE)
				continue;
			fill(buf, len, tag, m->size);
			if (io)
				full_write(f.append, buf, len, -1, what);
			memcpy(m->priv + m->size, buf, len);
			m->size += len;
		} else if (kind < 46) { /* truncate, up or down */
			size_t to = below(&s, MAX_PRIVATE);
			if (io && ftruncate(f.w, (off_t)to) < 0)
				die(what);
			if (to > m->size)
				memset(m->priv + m->size, 0, to - m->size);
			m->size = to;
		} else if (kind < 60) { /* pread, checked */
			size_t off = below(&s, m->size + 1), len = below(&s, MAX_IO);
			if (off + len > m->size)
				len = m->size - off;
			if (io && !check_read(f.r, m->priv + off, len, (off_t)off, what))
				bad++;
		} else if (kind < 72) { /* the shared file: write own range, read it back */
			size_t len = 1 + below(&s, RANGE / 3), off = lo + below(&s, RANGE - len);
			fill(buf, len, tag, off);
			if (io)
				full_write(f.shared_w, buf, len, (off_t)off, what);
			memcpy(m->shared + off, buf, len);
			off = lo + below(&s, RANGE);
			len = below(&s, lo + RANGE - off);
			if (io && !check_read(f.shared_r, m->shared + off, len, (off_t)off, what))
				bad++;
		} else if (kind < 84) { /* MAP_SHARED store, read through a mapping */
			int shared = below(&s, 2);
			size_t size = shared ? SHARED_SIZE : m->size;
			size_t from = shared ? lo : 0, span = shared ? RANGE : m->size;
			if (span < 2)
				continue;
			size_t len = 1 + below(&s, (span - 1) < MAX_IO ? span - 1 : MAX_IO);
			size_t off = from + below(&s, span - len);
			unsigned char *mm = shared ? m->shared : m->priv;
			int sync = below(&s, 3) == 0;
			fill(buf, len, tag, off);
			if (io) {
				int fd = open_as(shared ? "wb-shared" : "wb-private", shared ? -1 : w, O_RDWR);
				unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
				if (p == MAP_FAILED)
					die(what);
				memcpy(p + off, buf, len);
				if (sync && msync(p, size, MS_SYNC) < 0)
					die(what);
				if (memcmp(p + from, mm + from, off - from) ||
				    memcmp(p + off + len, mm + off + len, from + span - off - len)) {
					printf("%s: mapping differs from the model around %zu+%zu\n", what, off, len);
					bad++;
				}
				munmap(p, size);
				close(fd);
			}
			memcpy(mm + off, buf, len);
		} else if (kind < 92) { /* fsync or fdatasync */
			int data = below(&s, 2);
			if (io && (data ? fdatasync(f.w) : fsync(f.shared_w)) < 0)
				die(what);
		} else { /* close and reopen everything */
			if (io) {
				close_all(&f);
				open_all(&f, w);
			}
		}
	}
	if (io) {
		struct stat st;
		if (fstat(f.r, &st) < 0)
			die("fstat");
		if ((size_t)st.st_size != m->size) {
			printf("worker %d: size %lld, model %zu\n", w, (long long)st.st_size, m->size);
			bad++;
		}
		if (!check_read(f.r, m->priv, m->size, 0, "final private") ||
		    !check_read(f.shared_r, m->shared + lo, RANGE, (off_t)lo, "final shared"))
			bad++;
		close_all(&f);
	}
	return bad;
}

static void model_init(struct model *m)
{
	m->priv = calloc(1, MAX_PRIVATE);
	m->shared = calloc(1, SHARED_SIZE);
	m->size = 0;
	if (!m->priv || !m->shared)
		die("calloc");
}

/* The models after every worker's operations: each private file, and the shared file merged
 * from the workers' ranges. */
static void replay(uint64_t seed, struct model *priv, unsigned char *shared)
{
	for (int w = 0; w < WORKERS; w++) {
		model_init(&priv[w]);
		run_worker(w, seed, &priv[w], 0);
		memcpy(shared + (size_t)w * RANGE, priv[w].shared + (size_t)w * RANGE, RANGE);
	}
}

static uint64_t read_seed(void)
{
	char p[4200];
	unsigned long long seed;
	name_of(p, sizeof(p), "wb-seed", -1);
	FILE *f = fopen(p, "r");
	if (!f || fscanf(f, "%llu", &seed) != 1)
		die("reading wb-seed");
	fclose(f);
	return seed;
}

/* Size and content of base[-w] against want; name the check `check`. */
static void check_file(const char *check, const char *base, int w, const unsigned char *want,
		       size_t size, struct stat *st)
{
	int fd = open_as(base, w, O_RDONLY);
	if (fstat(fd, st) < 0)
		die("fstat");
	int ok = (size_t)st->st_size == size;
	if (!ok)
		printf("%s: size %lld, expected %zu\n", check, (long long)st->st_size, size);
	ok = ok && check_read(fd, want, size, 0, check);
	close(fd);
	result(ok, check, "content or size differs from the model");
}

#include "writeback-download.h"

static int guest(void)
{
	uint64_t seed = read_seed();
	static struct model priv[WORKERS];
	static unsigned char shared[SHARED_SIZE];
	struct stat before[WORKERS + 1], after;
	pid_t pids[WORKERS];
	char name[64];

	download();
	printf("seed %llu, %d workers x %d operations\n", (unsigned long long)seed, WORKERS, OPS);
	int fd = open_as("wb-shared", -1, O_WRONLY | O_CREAT | O_TRUNC);
	if (ftruncate(fd, SHARED_SIZE) < 0)
		die("ftruncate wb-shared");
	close(fd);
	for (int w = 0; w < WORKERS; w++) {
		pids[w] = fork();
		if (pids[w] < 0)
			die("fork");
		if (pids[w] == 0) {
			struct model m;
			model_init(&m);
			exit(run_worker(w, seed, &m, 1) ? 1 : 0);
		}
	}
	for (int w = 0; w < WORKERS; w++) {
		int status;
		snprintf(name, sizeof(name), "worker-%d", w);
		if (waitpid(pids[w], &status, 0) < 0)
			die("waitpid");
		result(WIFEXITED(status) && WEXITSTATUS(status) == 0, name, "status %#x", status);
	}
	replay(seed, priv, shared);
	for (int w = 0; w <= WORKERS; w++) {
		snprintf(name, sizeof(name), "before-drop-%d", w);
		if (w < WORKERS)
			check_file(name, "wb-private", w, priv[w].priv, priv[w].size, &before[w]);
		else
			check_file(name, "wb-shared", -1, shared, SHARED_SIZE, &before[w]);
	}
	sync();
	int dc = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (dc < 0 || write(dc, "3", 1) != 1)
		die("drop_caches");
	close(dc);
	char seen[4200];
	name_of(seen, sizeof(seen), "wb-seen", -1);
	FILE *out = fopen(seen, "w");
	if (!out)
		die(seen);
	for (int w = 0; w <= WORKERS; w++) {
		snprintf(name, sizeof(name), "after-drop-%d", w);
		if (w < WORKERS)
			check_file(name, "wb-private", w, priv[w].priv, priv[w].size, &after);
		else
			check_file(name, "wb-shared", -1, shared, SHARED_SIZE, &after);
		snprintf(name, sizeof(name), "after-drop-mtime-%d", w);
		result(after.st_mtim.tv_sec == before[w].st_mtim.tv_sec &&
			       after.st_mtim.tv_nsec == before[w].st_mtim.tv_nsec,
		       name, "mtime %lld.%09ld, before the drop %lld.%09ld",
		       (long long)after.st_mtim.tv_sec, after.st_mtim.tv_nsec,
		       (long long)before[w].st_mtim.tv_sec, before[w].st_mtim.tv_nsec);
		fprintf(out, "%d %lld %lld %ld\n", w, (long long)before[w].st_size,
			(long long)before[w].st_mtim.tv_sec, before[w].st_mtim.tv_nsec);
	}
	if (fclose(out) != 0)
		die(seen);
	printf("%d passed, %d failed\n", passed, failed);
	return failed;
}

static int host_verify(void)
{
	uint64_t seed = read_seed();
	static struct model priv[WORKERS];
	static unsigned char shared[SHARED_SIZE];
	struct stat st;
	char name[64], p[4200];

	replay(seed, priv, shared);
	static unsigned char want[DOWNLOAD_SIZE];
	for (size_t i = 0; i < DOWNLOAD_SIZE; i++)
		want[i] = download_byte(i);
	check_file("host-download", "wb-download-renamed", -1, want, DOWNLOAD_SIZE, &st);
	name_of(p, sizeof(p), "wb-seen", -1);
	FILE *f = fopen(p, "r");
	if (!f)
		die(p);
	for (int w = 0; w <= WORKERS; w++) {
		int n;
		long long size, sec;
		long nsec;
		snprintf(name, sizeof(name), "host-%d", w);
		if (w < WORKERS)
			check_file(name, "wb-private", w, priv[w].priv, priv[w].size, &st);
		else
			check_file(name, "wb-shared", -1, shared, SHARED_SIZE, &st);
		snprintf(name, sizeof(name), "host-seen-%d", w);
		if (fscanf(f, "%d %lld %lld %ld", &n, &size, &sec, &nsec) != 4 || n != w) {
			result(0, name, "wb-seen has no line for %d", w);
			continue;
		}
		result(size == st.st_size && sec == st.st_mtim.tv_sec && nsec == st.st_mtim.tv_nsec, name,
		       "host size %lld mtime %lld.%09ld, the guest saw %lld and %lld.%09ld",
		       (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, size, sec,
		       nsec);
	}
	fclose(f);
	printf("%d passed, %d failed\n", passed, failed);
	return failed;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: writeback-probe --make|run|--verify DIR\n");
		return 100;
	}
	snprintf(dir, sizeof(dir), "%s", argv[2]);
	if (!strcmp(argv[1], "--make")) {
		char p[4200];
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		name_of(p, sizeof(p), "wb-seed", -1);
		FILE *f = fopen(p, "w");
		if (!f || fprintf(f, "%llu\n", (unsigned long long)(ts.tv_sec * 1000003ULL ^ ts.tv_nsec) | 1) < 0 ||
		    fclose(f) != 0)
			die(p);
		host_download();
		return 0;
	}
	if (!strcmp(argv[1], "run"))
		return guest();
	if (!strcmp(argv[1], "--verify"))
		return host_verify();
	fprintf(stderr, "writeback-probe: unknown mode %s\n", argv[1]);
	return 100;
}
