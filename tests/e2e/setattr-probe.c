/* SETATTR as the guest's kernel allowed it (issue 38): the `setattr` and `setattr-never` cases
 * of run-all.sh, what the C pjdfstest's chmod/12.t, chown/00.t and chown/05.t check and its
 * crates.io port (the `pjdfstest` case) lacks. Guest root makes the files; a forked child with
 * another uid, gid and supplementary groups (setgroups/setresgid/setresuid: no capabilities)
 * does one operation:
 *   - a non-owner (65534, groups {65534}) writes 1 byte to a root-owned 04777, 02777, 06777 file
 *     (O_WRONLY, once O_RDWR): the kernel clears setuid/setgid with a SETATTR of the mode in that
 *     user's name, so the mode must be 0777 (fstat in the child, stat after);
 *   - the owner (65534, groups {65533, 65532}) changes the group of its regular file, dir, fifo,
 *     char and block device, socket and symlink to one of its supplementary groups with chown
 *     (through a symlink: its target's), lchown and fchownat(AT_SYMLINK_NOFOLLOW);
 *   - the same owner's chgrp of a 06555 file (set-id bits cleared: 0555) and of 06555 and 02755
 *     dirs (kept);
 *   - a non-owner who may write the file (0660 root:65533) only through its supplementary group
 *     65533 truncates it (truncate(2), open O_WRONLY|O_TRUNC) and touches it (utimensat NULL);
 *   - refusals: a non-owner's chmod, chgrp and explicit times, the owner's chown to another uid
 *     and chgrp to a group it is not in (EPERM), a truncate by a non-member (EACCES).
 * Each result (errno; mode, owner, group, size, whether the mtime moved) must match a fixed table
 * and the same sequence on the guest's own tmpfs (/tmp), in the guest and after drop_caches with
 * statx(AT_STATX_FORCE_SYNC), which asks the daemon.
 *
 *   setattr-probe DIR     as root in the guest: DIR/setattr on the share, /tmp/setattr-ref
 *
 * Exits with the number of failed checks. Build: gcc -O2 -static -o setattr-probe setattr-probe.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe.h"

#define REF "/tmp/setattr-ref"
#define NOBODY 65534
#define GROUP_A 65533 /* the owner's supplementary groups */
#define GROUP_B 65532
#define NOT_MEMBER 65531
#define OLD_TIME 1000000000 /* mtime root gives its regular files: a touch moves it */

struct creds {
	const char *name;
	uid_t uid;
	gid_t gid;
	int ngroups;
	gid_t groups[2];
};
/* A non-owner: only its own group. */
static const struct creds other = { "65534-groups-65534", NOBODY, NOBODY, 1, { NOBODY } };
/* The owner of the 65534 files, and a non-owner of root's files, in two more groups. */
static const struct creds owner = { "65534-groups-65533-65532", NOBODY, NOBODY, 2, { GROUP_A, GROUP_B } };
/* A non-owner allowed to write through its supplementary group 65533. */
static const struct creds member = { "65534-groups-65533", NOBODY, NOBODY, 1, { GROUP_A } };

enum kind { NONE, REG, DIR_, FIFO, CHR, BLK, SOCK, SYMLINK };
enum op {
	OP_NONE, /* only look */
	OP_WRITE, /* open O_WRONLY, write 1 byte, fstat */
	OP_WRITE_RDWR, /* open O_RDWR, write 1 byte, fstat */
	OP_CHGRP, /* chown(path, -1, arg) */
	OP_LCHGRP, /* lchown(path, -1, arg) */
	OP_FCHGRPAT, /* fchownat(AT_FDCWD, path, -1, arg, AT_SYMLINK_NOFOLLOW) */
	OP_CHOWN_UID, /* chown(path, arg, -1) */
	OP_CHMOD, /* chmod(path, arg) */
	OP_TRUNCATE, /* truncate(path, arg) */
	OP_OPEN_TRUNC, /* open O_WRONLY|O_TRUNC */
	OP_TOUCH, /* utimensat(path, NULL) */
	OP_UTIMES, /* utimensat(path, {arg, arg}) */
};

struct step {
	const char *name;
	const char *file; /* in the test dir */
	enum kind make; /* what root makes there first (NONE: the object of the step before) */
	mode_t mode;
	uid_t uid;
	gid_t gid;
	const char *target; /* SYMLINK: its target (made by an earlier step) */
	const struct creds *who;
	enum op op;
	long arg;
	int want_err;
	const char *seen; /* the name looked at afterwards (NULL: file) */
	int follow; /* stat (1) or lstat (0) */
	mode_t want_mode; /* the mode's 07777 bits; fstat in the child too for writes */
	uid_t want_uid;
	gid_t want_gid;
	long long want_size; /* -1: any */
	int want_touched; /* -1: any; else whether the mtime left OLD_TIME */
};

#define LOOK(f) NULL, f
#define OWNED 65534, GROUP_A
static const struct step steps[] = {
	/* 1. A non-owner's write clears setuid/setgid (chmod/12.t). */
	{ "write-04777", "w4", REG, 04777, 0, 0, NULL, &other, OP_WRITE, 0, 0, LOOK(1), 0777, 0, 0, 10, -1 },
	{ "write-02777", "w2", REG, 02777, 0, 0, NULL, &other, OP_WRITE, 0, 0, LOOK(1), 0777, 0, 0, 10, -1 },
	{ "write-06777", "w6", REG, 06777, 0, 0, NULL, &other, OP_WRITE, 0, 0, LOOK(1), 0777, 0, 0, 10, -1 },
	{ "rdwr-06777", "rw6", REG, 06777, 0, 0, NULL, &other, OP_WRITE_RDWR, 0, 0, LOOK(1), 0777, 0, 0, 10, -1 },
	/* 2. The owner's chgrp to its supplementary groups, every file type (chown/00.t, 05.t). */
#define CHGRP_STEPS(k, f, m)                                                                       \
	{ "chown-" f, f, k, m, OWNED, NULL, &owner, OP_CHGRP, GROUP_B, 0, LOOK(0), m, 65534, GROUP_B, -1, -1 }, \
	{ "lchown-" f, f, NONE, 0, 0, 0, NULL, &owner, OP_LCHGRP, GROUP_A, 0, LOOK(0), m, 65534, GROUP_A, -1, -1 }, \
	{ "fchownat-nofollow-" f, f, NONE, 0, 0, 0, NULL, &owner, OP_FCHGRPAT, GROUP_B, 0, LOOK(0), m, 65534, GROUP_B, -1, -1 }
	CHGRP_STEPS(REG, "regular", 0644),
	CHGRP_STEPS(DIR_, "dir", 0755),
	CHGRP_STEPS(FIFO, "fifo", 0644),
	CHGRP_STEPS(CHR, "char", 0644),
	CHGRP_STEPS(BLK, "block", 0644),
	CHGRP_STEPS(SOCK, "socket", 0644),
	/* chown through a symlink changes its target; lchown and fchownat(NOFOLLOW) the link. */
	{ "symlink-target", "target", REG, 0644, OWNED, NULL, &owner, OP_NONE, 0, 0, LOOK(0), 0644, 65534, GROUP_A, 10, -1 },
	{ "chown-via-symlink", "symlink", SYMLINK, 0, OWNED, "target", &owner, OP_CHGRP, GROUP_B, 0, "target", 0, 0644, 65534, GROUP_B, 10, -1 },
	{ "chown-via-symlink-link-kept", "symlink", NONE, 0, 0, 0, NULL, &owner, OP_NONE, 0, 0, LOOK(0), 0777, 65534, GROUP_A, -1, -1 },
	{ "lchown-symlink", "symlink", NONE, 0, 0, 0, NULL, &owner, OP_LCHGRP, GROUP_B, 0, LOOK(0), 0777, 65534, GROUP_B, -1, -1 },
	{ "lchown-symlink-target-kept", "target", NONE, 0, 0, 0, NULL, &owner, OP_NONE, 0, 0, LOOK(0), 0644, 65534, GROUP_B, 10, -1 },
	{ "fchownat-nofollow-symlink", "symlink", NONE, 0, 0, 0, NULL, &owner, OP_FCHGRPAT, GROUP_A, 0, LOOK(0), 0777, 65534, GROUP_A, -1, -1 },
	{ "fchownat-nofollow-symlink-target-kept", "target", NONE, 0, 0, 0, NULL, &owner, OP_NONE, 0, 0, LOOK(0), 0644, 65534, GROUP_B, 10, -1 },
	/* 3. Set-id bits after the owner's chgrp: cleared on a file, kept on a dir (chown/00.t). */
	{ "chgrp-file-06555", "s6", REG, 06555, OWNED, NULL, &owner, OP_CHGRP, GROUP_B, 0, LOOK(0), 0555, 65534, GROUP_B, 10, -1 },
	{ "chgrp-dir-06555", "d6", DIR_, 06555, OWNED, NULL, &owner, OP_CHGRP, GROUP_B, 0, LOOK(0), 06555, 65534, GROUP_B, -1, -1 },
	{ "chgrp-dir-02755", "d2", DIR_, 02755, OWNED, NULL, &owner, OP_CHGRP, GROUP_B, 0, LOOK(0), 02755, 65534, GROUP_B, -1, -1 },
	/* 4. Truncate and touch allowed only through a supplementary group. */
	{ "group-truncate", "gt", REG, 0660, 0, GROUP_A, NULL, &member, OP_TRUNCATE, 4, 0, LOOK(0), 0660, 0, GROUP_A, 4, 1 },
	{ "group-open-trunc", "go", REG, 0660, 0, GROUP_A, NULL, &member, OP_OPEN_TRUNC, 0, 0, LOOK(0), 0660, 0, GROUP_A, 0, 1 },
	{ "group-touch", "gu", REG, 0660, 0, GROUP_A, NULL, &member, OP_TOUCH, 0, 0, LOOK(0), 0660, 0, GROUP_A, 10, 1 },
	/* 5. Refused, and nothing changes. */
	{ "nonmember-truncate", "nt", REG, 0660, 0, GROUP_A, NULL, &other, OP_TRUNCATE, 4, EACCES, LOOK(0), 0660, 0, GROUP_A, 10, 0 },
	{ "nonowner-chmod", "nc", REG, 0666, 0, 0, NULL, &other, OP_CHMOD, 0777, EPERM, LOOK(0), 0666, 0, 0, 10, 0 },
	{ "nonowner-chgrp", "ng", REG, 0644, 0, 0, NULL, &owner, OP_CHGRP, GROUP_A, EPERM, LOOK(0), 0644, 0, 0, 10, 0 },
	{ "nonowner-utimes", "nu", REG, 0666, 0, 0, NULL, &other, OP_UTIMES, 5, EPERM, LOOK(0), 0666, 0, 0, 10, 0 },
	{ "owner-chown-uid", "ou", REG, 0644, OWNED, NULL, &owner, OP_CHOWN_UID, 1000, EPERM, LOOK(0), 0644, 65534, GROUP_A, 10, 0 },
	{ "owner-chgrp-nonmember", "og", REG, 0644, OWNED, NULL, &owner, OP_CHGRP, NOT_MEMBER, EPERM, LOOK(0), 0644, 65534, GROUP_A, 10, 0 },
};
#define NSTEPS (sizeof(steps) / sizeof(steps[0]))

struct obs {
	int err; /* of stat: 0 or an errno */
	mode_t mode; /* 07777 bits */
	uid_t uid;
	gid_t gid;
	long long size;
	int touched;
};

/* What the child reports: the operation's errno, and for a write the mode fstat saw. */
struct outcome {
	int err;
	mode_t fstat_mode;
};

/* One directory's results per step: the operation's outcome, the look right after it, and the
 * look after drop_caches. */
struct run {
	struct outcome out[NSTEPS];
	struct obs now[NSTEPS], later[NSTEPS];
};
static struct run share, ref;

/* Root makes the step's object in `dir` (mode after chown: a chown clears set-id bits); 0 or an
 * errno. */
static int make(const char *dir, const struct step *s)
{
	char p[4096];
	int fd, e = 0;
	snprintf(p, sizeof(p), "%s/%s", dir, s->file);
	switch (s->make) {
	case NONE:
		return 0;
	case REG:
		fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
		if (fd < 0 || write(fd, "0123456789", 10) != 10)
			e = errno;
		if (fd >= 0)
			close(fd);
		break;
	case DIR_:
		e = mkdir(p, 0700) ? errno : 0;
		break;
	case FIFO:
		e = mkfifo(p, 0600) ? errno : 0;
		break;
	case CHR:
		e = mknod(p, S_IFCHR | 0600, makedev(1, 3)) ? errno : 0;
		break;
	case BLK:
		e = mknod(p, S_IFBLK | 0600, makedev(7, 0)) ? errno : 0;
		break;
	case SOCK: {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		if (strlen(p) >= sizeof(a.sun_path))
			return ENAMETOOLONG;
		strcpy(a.sun_path, p);
		fd = socket(AF_UNIX, SOCK_STREAM, 0);
		if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)))
			e = errno;
		if (fd >= 0)
			close(fd);
		break;
	}
	case SYMLINK:
		e = symlink(s->target, p) ? errno : 0;
		break;
	}
	if (e)
		return e;
	if (lchown(p, s->uid, s->gid))
		return errno;
	if (s->make != SYMLINK && chmod(p, s->mode))
		return errno;
	if (s->make == REG) {
		struct timespec t[2] = { { OLD_TIME, 0 }, { OLD_TIME, 0 } };
		if (utimensat(AT_FDCWD, p, t, 0))
			return errno;
	}
	return 0;
}

/* The step's operation on `p`, as the current user; 0 or an errno. */
static int apply(const struct step *s, const char *p, mode_t *fstat_mode)
{
	int fd, e = 0;
	struct stat st;
	switch (s->op) {
	case OP_NONE:
		return 0;
	case OP_WRITE:
	case OP_WRITE_RDWR:
		fd = open(p, s->op == OP_WRITE ? O_WRONLY : O_RDWR);
		if (fd < 0)
			return errno;
		if (write(fd, "x", 1) != 1)
			e = errno;
		else if (fstat(fd, &st))
			e = errno;
		else
			*fstat_mode = st.st_mode & 07777;
		close(fd);
		return e;
	case OP_CHGRP:
		return chown(p, -1, s->arg) ? errno : 0;
	case OP_LCHGRP:
		return lchown(p, -1, s->arg) ? errno : 0;
	case OP_FCHGRPAT:
		return fchownat(AT_FDCWD, p, -1, s->arg, AT_SYMLINK_NOFOLLOW) ? errno : 0;
	case OP_CHOWN_UID:
		return chown(p, s->arg, -1) ? errno : 0;
	case OP_CHMOD:
		return chmod(p, s->arg) ? errno : 0;
	case OP_TRUNCATE:
		return truncate(p, s->arg) ? errno : 0;
	case OP_OPEN_TRUNC:
		fd = open(p, O_WRONLY | O_TRUNC);
		if (fd < 0)
			return errno;
		close(fd);
		return 0;
	case OP_TOUCH:
		return utimensat(AT_FDCWD, p, NULL, 0) ? errno : 0;
	case OP_UTIMES: {
		struct timespec t[2] = { { s->arg, 0 }, { s->arg, 0 } };
		return utimensat(AT_FDCWD, p, t, 0) ? errno : 0;
	}
	}
	return EINVAL;
}

/* Runs the step's operation in a child with the step's ids; -1 in err if the child failed. */
static struct outcome as_user(const struct step *s, const char *p)
{
	struct outcome o = { -1, (mode_t)-1 };
	int fds[2];
	if (pipe(fds))
		return o;
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		const struct creds *c = s->who;
		if (setgroups(c->ngroups, c->groups) || setresgid(c->gid, c->gid, c->gid) ||
		    setresuid(c->uid, c->uid, c->uid))
			_exit(99);
		struct outcome r = { 0, (mode_t)-1 };
		r.err = apply(s, p, &r.fstat_mode);
		_exit(write(fds[1], &r, sizeof(r)) == sizeof(r) ? 0 : 98);
	}
	close(fds[1]);
	if (pid > 0 && read(fds[0], &o, sizeof(o)) != sizeof(o))
		o.err = -1;
	close(fds[0]);
	int st;
	if (pid > 0)
		waitpid(pid, &st, 0);
	return o;
}

/* stat or lstat of the step's name; `sync`: statx(AT_STATX_FORCE_SYNC), the daemon's answer. */
static struct obs look(const char *dir, const struct step *s, int sync)
{
	char p[4096];
	struct obs o = { 0 };
	struct statx st;
	snprintf(p, sizeof(p), "%s/%s", dir, s->seen ? s->seen : s->file);
	int flags = (s->follow ? 0 : AT_SYMLINK_NOFOLLOW) | (sync ? AT_STATX_FORCE_SYNC : 0);
	if (statx(AT_FDCWD, p, flags, STATX_BASIC_STATS, &st)) {
		o.err = errno;
		return o;
	}
	o.mode = st.stx_mode & 07777;
	o.uid = st.stx_uid;
	o.gid = st.stx_gid;
	o.size = S_ISREG(st.stx_mode) ? (long long)st.stx_size : -1;
	o.touched = st.stx_mtime.tv_sec != OLD_TIME;
	return o;
}

static int drop_failed;

/* echo 3 > /proc/sys/vm/drop_caches: the next look asks the daemon. 1 on success. */
static int drop_caches(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	int ok = fd >= 0 && write(fd, "3", 1) == 1;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* Every step in `dir` (its object made first), into `r`: the outcome and both looks. */
static void run_all(const char *dir, struct run *r)
{
	char p[4096];
	if (mkdir(dir, 0755) && errno != EEXIST) {
		result(0, dir, "mkdir: %s", strerror(errno));
		return;
	}
	for (unsigned i = 0; i < NSTEPS; i++) {
		const struct step *s = &steps[i];
		int e = make(dir, s);
		if (e) {
			char name[128];
			snprintf(name, sizeof(name), "make-%s-in-%s", s->file, dir);
			result(0, name, "%s", strerror(e));
		}
		snprintf(p, sizeof(p), "%s/%s", dir, s->file);
		r->out[i] = s->op == OP_NONE ? (struct outcome){ 0, (mode_t)-1 } : as_user(s, p);
		r->now[i] = look(dir, s, 0);
		if (!drop_caches())
			drop_failed++;
		r->later[i] = look(dir, s, 1);
	}
}

static int obs_eq(const struct obs *a, const struct obs *b)
{
	return a->err == b->err && a->mode == b->mode && a->uid == b->uid && a->gid == b->gid &&
	       a->size == b->size && a->touched == b->touched;
}

static int obs_want(const struct step *s, const struct obs *o)
{
	return o->err == 0 && o->mode == s->want_mode && o->uid == s->want_uid &&
	       o->gid == s->want_gid && (s->want_size < 0 || o->size == s->want_size) &&
	       (s->want_touched < 0 || o->touched == s->want_touched);
}

#define OBS_FMT "%s mode %o uid %u gid %u size %lld mtime %s"
#define OBS_ARGS(o)                                                                                \
	(o).err ? strerror((o).err) : "ok", (o).mode, (o).uid, (o).gid, (o).size,                  \
		(o).touched ? "moved" : "kept"

static void check_look(const struct step *s, const char *what, const struct obs *o,
		       const struct obs *tmpfs)
{
	char name[160];
	snprintf(name, sizeof(name), "%s-%s", s->name, what);
	result(obs_want(s, o) && obs_eq(o, tmpfs), name,
	       "virtio-fs " OBS_FMT "; tmpfs " OBS_FMT "; want mode %o uid %u gid %u size %lld",
	       OBS_ARGS(*o), OBS_ARGS(*tmpfs), s->want_mode, s->want_uid, s->want_gid,
	       s->want_size);
}

static const char *err_name(int e)
{
	return e < 0 ? "child failed" : e ? strerror(e) : "ok";
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: setattr-probe DIR (as root; also uses %s)\n", REF);
		return 2;
	}
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/setattr", argv[1]);
	umask(0);
	run_all(dir, &share);
	run_all(REF, &ref);

	result(!drop_failed, "drop-caches", "%d of %d writes to /proc/sys/vm/drop_caches failed",
	       drop_failed, (int)(2 * NSTEPS));
	for (unsigned i = 0; i < NSTEPS; i++) {
		const struct step *s = &steps[i];
		const struct outcome *o = &share.out[i], *t = &ref.out[i];
		char name[160];
		if (s->op != OP_NONE) {
			snprintf(name, sizeof(name), "%s-as-%s", s->name, s->who->name);
			result(o->err == s->want_err && t->err == s->want_err, name,
			       "virtio-fs %s, tmpfs %s, want %s", err_name(o->err),
			       err_name(t->err), err_name(s->want_err));
		}
		if (s->op == OP_WRITE || s->op == OP_WRITE_RDWR) {
			snprintf(name, sizeof(name), "%s-fstat-in-child", s->name);
			result(o->fstat_mode == s->want_mode && t->fstat_mode == s->want_mode, name,
			       "virtio-fs %o, tmpfs %o, want %o", o->fstat_mode, t->fstat_mode,
			       s->want_mode);
		}
		check_look(s, "stat", &share.now[i], &ref.now[i]);
		check_look(s, "stat-after-drop-caches", &share.later[i], &ref.later[i]);
	}
	printf("setattr-probe: %d passed, %d failed\n", passed, failed);
	return failed;
}
