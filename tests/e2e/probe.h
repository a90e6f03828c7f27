/* Shared by the e2e guest probes (posix-probe.c, mmap-probe.c): one check, printed as
 * "PASS: name" or "FAIL: name (details)" like guest-fs-test.sh does, and counted. */
#ifndef VHOSTFS_E2E_PROBE_H
#define VHOSTFS_E2E_PROBE_H

#include <stdarg.h>
#include <stdio.h>

static int failed, passed;

static void __attribute__((format(printf, 3, 4))) result(int ok, const char *name,
							 const char *fmt, ...)
{
	if (ok) {
		passed++;
		printf("PASS: %s\n", name);
	} else {
		va_list ap;
		failed++;
		printf("FAIL: %s (", name);
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf(")\n");
	}
	fflush(stdout);
}

#endif
