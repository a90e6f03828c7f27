//! `--seccomp=kill|log|trap|none`: a syscall allowlist for the serving daemon.
//!
//! The filter is built with `seccompiler` (pure Rust, maintained by the rust-vmm/Firecracker
//! people, no libseccomp C library to link) and installed on every thread of the process
//! (`SECCOMP_FILTER_FLAG_TSYNC`) once the sandbox is complete: after `pivot_root`/`chroot`,
//! Landlock and the capability drop, right before the socket accepts the frontend.
//!
//! Invariants:
//! - [`ALLOWED`] lists exactly the syscalls the daemon makes *after* the filter is installed:
//!   vhost-user serving (epoll threads of vhost-user-backend, eventfds, `recvmsg`/`sendmsg` with
//!   fds, `mmap` of guest memory), every FUSE operation of `passthrough/`, Rust std (threads,
//!   allocator, `getrandom` for hash maps, panics: `tgkill`/`rt_sigprocmask`), glibc and
//!   logging (stderr `write`; `sendto`/`sendmsg` to a connected syslog socket). Set-up-only
//!   syscalls (`mount`, `unshare` of namespaces, `pivot_root`, `bind`, `listen`, `prctl`
//!   capability bounding, Landlock calls) are not in it; `capget`/`capset` are, for the
//!   per-thread CAP_FSETID toggle of `--killpriv-v2`. The list was taken from `strace -f` of the
//!   integration tests and of the QEMU end-to-end guest test (docs/security.md); a new syscall
//!   in the code must be added here, and the integration tests (which run under `kill` by
//!   default) fail if it is not.
//! - Arguments are not filtered (but for `unshare`, allowed with CLONE_FS alone: see
//!   [`UNSHARE_FLAGS`], and `ioctl`, allowed for FS_IOC_GETFLAGS alone: [`IOCTL_REQUEST`]): the filter bounds what a compromised daemon can ask of the kernel, the
//!   sandbox bounds what those calls can reach.
//! - `kill` ends the whole process (`SECCOMP_RET_KILL_PROCESS`), `trap` sends SIGSYS to the
//!   thread, `log` lets the call through and has the kernel log it (audit type 1326).

use crate::option_values::option_values;
use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

option_values! {
    /// What happens on a syscall outside the allowlist (`--seccomp`).
    pub enum SeccompMode {
        /// No filter.
        None = "none",
        /// Kill the process (default, as in virtiofsd).
        Kill = "kill",
        /// Allow the call and log it in the kernel log.
        Log = "log",
        /// Send SIGSYS to the calling thread.
        Trap = "trap",
    }
}

/// The syscalls the serving daemon may make (see the module invariants).
pub const ALLOWED: &[libc::c_long] = &[
    // vhost-user connection, epoll threads, eventfds, guest memory.
    libc::SYS_accept4,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_eventfd2,
    // The metrics endpoint: reading a request, its socket's timeouts.
    libc::SYS_recvfrom,
    libc::SYS_setsockopt,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_sendto,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mremap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_brk,
    libc::SYS_shutdown,
    libc::SYS_dup,
    libc::SYS_dup3,
    // Threads, signals, time (Rust std, glibc).
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    libc::SYS_sigaltstack,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    // The signal thread's sigwait (SIGTERM/SIGINT: clean exit).
    libc::SYS_rt_sigtimedwait,
    libc::SYS_futex,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_yield,
    libc::SYS_prctl,
    libc::SYS_gettid,
    libc::SYS_getpid,
    libc::SYS_tgkill,
    libc::SYS_getrandom,
    libc::SYS_clock_gettime,
    // Whether a request that took long blocked (vhost_device/drain.rs).
    libc::SYS_getrusage,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_restart_syscall,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_prlimit64,
    libc::SYS_poll,
    libc::SYS_ppoll,
    // Files: fds, data, metadata (passthrough/, file_handle.rs, logging to stderr).
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_close,
    libc::SYS_fcntl,
    libc::SYS_lseek,
    libc::SYS_openat,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_statx,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_fstatfs,
    libc::SYS_getdents64,
    libc::SYS_readlinkat,
    libc::SYS_mkdirat,
    libc::SYS_mknodat,
    libc::SYS_symlinkat,
    libc::SYS_linkat,
    libc::SYS_unlinkat,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchownat,
    libc::SYS_utimensat,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_syncfs,
    libc::SYS_copy_file_range,
    libc::SYS_fgetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_flistxattr,
    libc::SYS_fremovexattr,
    // Security labels of new symlinks and special files (passthrough/sys/xattr.rs,
    // `setxattr_o_path`: `unshare(CLONE_FS)` once per thread, see `UNSHARE_FLAGS`).
    libc::SYS_fchdir,
    libc::SYS_setxattr,
    libc::SYS_unshare,
    libc::SYS_flock,
    // Removing the pid file and the socket on exit (ENOENT once confined, but not fatal).
    libc::SYS_unlink,
    // Per-request credentials (credentials.rs).
    libc::SYS_setfsuid,
    libc::SYS_setfsgid,
    // CAP_FSETID out of and back into one thread's effective set (`--killpriv-v2`); capset
    // cannot go beyond the permitted set, which the sandbox already narrowed.
    libc::SYS_capget,
    libc::SYS_capset,
];

/// The one `unshare` allowed while serving, an argument filter (the exception to "arguments are
/// not filtered"): CLONE_FS, which gives a thread its own cwd and nothing else. Namespaces stay
/// out of reach.
pub const UNSHARE_FLAGS: u64 = libc::CLONE_FS as u64;

/// The one `ioctl` allowed while serving, an argument filter too: FS_IOC_GETFLAGS, which reads a
/// directory's inode flags (`--case-insensitive` leaves a host directory that is case-insensitive
/// itself, FS_CASEFOLD_FL, to the host).
pub const IOCTL_REQUEST: u64 = libc::FS_IOC_GETFLAGS;

/// The BPF program for `mode`, `None` for [`SeccompMode::None`].
pub fn program(mode: SeccompMode) -> Result<Option<BpfProgram>, String> {
    let mismatch = match mode {
        SeccompMode::Kill => SeccompAction::KillProcess,
        SeccompMode::Log => SeccompAction::Log,
        SeccompMode::Trap => SeccompAction::Trap,
        SeccompMode::None => return Ok(None),
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        ALLOWED.iter().map(|&nr| (nr, Vec::new())).collect();
    let unshare =
        SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::Eq, UNSHARE_FLAGS)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| format!("seccomp: {e}"))?;
    rules.insert(libc::SYS_unshare, vec![unshare]);
    let ioctl = SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, IOCTL_REQUEST)
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(|e| format!("seccomp: {e}"))?;
    rules.insert(libc::SYS_ioctl, vec![ioctl]);
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("seccomp: unsupported architecture: {e}"))?;
    let filter = SeccompFilter::new(rules, mismatch, SeccompAction::Allow, arch)
        .map_err(|e| format!("seccomp: {e}"))?;
    filter
        .try_into()
        .map(Some)
        .map_err(|e: seccompiler::BackendError| format!("seccomp: {e}"))
}

/// Installs the filter of `mode` on every thread of the process (sets `no_new_privs`).
pub fn install(mode: SeccompMode) -> Result<(), String> {
    if let Some(prog) = program(mode)? {
        seccompiler::apply_filter_all_threads(&prog)
            .map_err(|e| format!("cannot install the seccomp filter: {e}; pass --seccomp=none"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
