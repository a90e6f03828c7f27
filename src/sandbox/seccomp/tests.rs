//! The filter in a forked child: an allowed syscall passes, a forbidden one kills (`kill`),
//! raises SIGSYS (`trap`) or goes through and is logged by the kernel (`log`).

use super::*;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

/// A syscall the daemon never makes.
const FORBIDDEN: libc::c_long = libc::SYS_getppid;

extern "C" fn exit_42(_: libc::c_int) {
    // SAFETY: async-signal-safe.
    unsafe { libc::_exit(42) };
}

/// Forks; the child installs the filter of `mode` on itself, makes syscall `nr` and exits 0.
/// Returns the child's pid and wait status.
fn child_calls(mode: SeccompMode, nr: libc::c_long) -> (libc::pid_t, libc::c_int) {
    child_calls_with(mode, nr, 0)
}

/// [`child_calls`] with `arg` as the syscall's first argument.
fn child_calls_with(
    mode: SeccompMode,
    nr: libc::c_long,
    arg: libc::c_long,
) -> (libc::pid_t, libc::c_int) {
    let prog = program(mode).unwrap().unwrap();
    // SAFETY: the child only makes async-signal-safe calls (sigaction, prctl, seccomp,
    // syscall, _exit); the program was built before the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: see above.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = exit_42 as extern "C" fn(libc::c_int) as usize;
            libc::sigaction(libc::SIGSYS, &sa, std::ptr::null_mut());
            if seccompiler::apply_filter(&prog).is_err() {
                libc::_exit(3);
            }
            libc::syscall(nr, arg);
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: valid out pointer; our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    (pid, status)
}

#[test]
fn the_test_syscall_is_forbidden_and_getpid_is_not() {
    assert!(!ALLOWED.contains(&FORBIDDEN));
    assert!(ALLOWED.contains(&libc::SYS_getpid));
}

#[test]
fn allowed_syscalls_pass_under_kill() {
    let (_, status) = child_calls(SeccompMode::Kill, libc::SYS_getpid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{status:#x}"
    );
}

#[test]
fn kill_kills_the_process_on_a_forbidden_syscall() {
    let (_, status) = child_calls(SeccompMode::Kill, FORBIDDEN);
    assert!(libc::WIFSIGNALED(status), "not killed: {status:#x}");
    assert_eq!(libc::WTERMSIG(status), libc::SIGSYS);
}

#[test]
fn trap_raises_sigsys() {
    let (_, status) = child_calls(SeccompMode::Trap, FORBIDDEN);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 42,
        "{status:#x}"
    );
}

#[test]
fn log_lets_the_call_through_and_the_kernel_logs_it() {
    let (pid, status) = child_calls(SeccompMode::Log, FORBIDDEN);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{status:#x}"
    );
    // The kernel logs SECCOMP_RET_LOG as an audit record (type 1326) naming pid and syscall.
    let want_pid = format!(" pid={pid} ");
    let want_nr = format!(" syscall={FORBIDDEN} ");
    for _ in 0..50 {
        let mut kmsg = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .expect("/dev/kmsg (run as root)");
        let mut record = vec![0u8; 8192];
        // One record per read, until EAGAIN at the end of the buffer.
        while let Ok(n) = kmsg.read(&mut record) {
            let line = String::from_utf8_lossy(&record[..n]);
            if line.contains(&want_pid) && line.contains(&want_nr) {
                return;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("no kernel log record of syscall {FORBIDDEN} by pid {pid}");
}

#[test]
fn unshare_is_allowed_for_clone_fs_only() {
    let fs = libc::CLONE_FS as libc::c_long;
    let (_, status) = child_calls_with(SeccompMode::Kill, libc::SYS_unshare, fs);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{status:#x}"
    );
    for flags in [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS | libc::CLONE_FS,
        0,
    ] {
        let (_, status) = child_calls_with(SeccompMode::Kill, libc::SYS_unshare, flags.into());
        assert!(
            libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSYS,
            "unshare({flags:#x}) not killed: {status:#x}"
        );
    }
}
