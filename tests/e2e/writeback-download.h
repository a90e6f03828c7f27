/* Proxmox VE's truncated files (docs/writeback.md), for writeback-probe.c (included after its
 * helpers): the host grows wb-download from DOWNLOAD_START to DOWNLOAD_SIZE bytes after the guest
 * read and touched it; the guest must then see, read and rename the whole file. */
#ifndef VHOSTFS_E2E_WRITEBACK_DOWNLOAD_H
#define VHOSTFS_E2E_WRITEBACK_DOWNLOAD_H

#define DOWNLOAD_START (64 * 1024)
#define DOWNLOAD_SIZE (1024 * 1024)

static unsigned char download_byte(size_t i)
{
	return (unsigned char)(i * 7 + i / 1000);
}

static int exists(const char *base)
{
	char p[4200];
	struct stat st;
	name_of(p, sizeof(p), base, -1);
	return stat(p, &st) == 0;
}

/* Host, in the background: waits for the guest's touch, then completes the download. */
static void host_download(void)
{
	static unsigned char buf[DOWNLOAD_SIZE];
	for (size_t i = 0; i < DOWNLOAD_SIZE; i++)
		buf[i] = download_byte(i);
	int fd = open_as("wb-download", -1, O_WRONLY | O_CREAT | O_TRUNC);
	full_write(fd, buf, DOWNLOAD_START, 0, "wb-download");
	fsync(fd);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid > 0) {
		close(fd);
		return;
	}
	setsid();
	int null = open("/dev/null", O_RDWR);
	if (null >= 0) {
		dup2(null, 0);
		dup2(null, 1);
		dup2(null, 2);
	}
	/* At most 120 s: the case's guest touches the file within seconds of booting. */
	for (int i = 0; i < 6000 && !exists("wb-touched"); i++)
		usleep(20000);
	if (exists("wb-touched")) {
		full_write(fd, buf + DOWNLOAD_START, DOWNLOAD_SIZE - DOWNLOAD_START, DOWNLOAD_START,
			   "wb-download");
		fsync(fd);
		close(open_as("wb-host-done", -1, O_WRONLY | O_CREAT));
	}
	_exit(0);
}

static void download(void)
{
	static unsigned char want[DOWNLOAD_SIZE];
	char p[4200], moved[4200];
	struct stat st;
	struct timespec ts = {1, 500000000}; /* past the 1 s entry timeout of --cache=auto */

	for (size_t i = 0; i < DOWNLOAD_SIZE; i++)
		want[i] = download_byte(i);
	name_of(p, sizeof(p), "wb-download", -1);
	if (stat(p, &st) < 0)
		die(p);
	int fd = open_as("wb-download", -1, O_RDONLY);
	result(check_read(fd, want, DOWNLOAD_START, 0, "download-start"), "download-start",
	       "the first %d bytes", DOWNLOAD_START);
	close(fd);
	/* touch(1) */
	fd = open_as("wb-download", -1, O_WRONLY);
	if (futimens(fd, NULL) < 0)
		die("futimens");
	close(fd);
	close(open_as("wb-touched", -1, O_WRONLY | O_CREAT));
	for (int i = 0; i < 3000 && !exists("wb-host-done"); i++)
		usleep(20000);
	result(exists("wb-host-done"), "download-host-done", "the host did not finish in 60 s");
	nanosleep(&ts, NULL);
	if (stat(p, &st) < 0)
		die(p);
	result(st.st_size == DOWNLOAD_SIZE, "download-size", "size %lld, the host's %d",
	       (long long)st.st_size, DOWNLOAD_SIZE);
	fd = open_as("wb-download", -1, O_RDONLY);
	result(check_read(fd, want, DOWNLOAD_SIZE, 0, "download-content"), "download-content",
	       "the whole file");
	close(fd);
	name_of(moved, sizeof(moved), "wb-download-renamed", -1);
	if (rename(p, moved) < 0)
		die("rename");
	result(stat(moved, &st) == 0 && st.st_size == DOWNLOAD_SIZE, "download-renamed",
	       "size %lld", (long long)st.st_size);
}

#endif
