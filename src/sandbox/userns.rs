//! The user namespace of an unprivileged `namespace` run: `--uid-map`/`--gid-map` ranges and
//! the helper child that writes them from outside.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};

use super::{check, os_err, pipe};

/// One range of a user namespace's id map (`--uid-map`/`--gid-map`), in virtiofsd's syntax
/// `:inside:outside:count:` (any non-alphanumeric delimiter, the same at every place).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdMap {
    /// First id inside the namespace.
    pub inside: u32,
    /// First id on the host it maps to.
    pub outside: u32,
    /// Number of ids.
    pub count: u32,
}

impl std::str::FromStr for IdMap {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let syntax = || "expected :namespace_id:host_id:count:".to_string();
        let delim = s.chars().next().filter(|c| !c.is_alphanumeric());
        let delim = delim.ok_or_else(syntax)?;
        let inner = s
            .strip_prefix(delim)
            .and_then(|r| r.strip_suffix(delim))
            .ok_or_else(syntax)?;
        let fields: Vec<u32> = inner
            .split(delim)
            .map(|f| f.parse().map_err(|e| format!("'{f}': {e}")))
            .collect::<Result<_, _>>()?;
        match fields[..] {
            [inside, outside, count] => Ok(IdMap {
                inside,
                outside,
                count,
            }),
            _ => Err(syntax()),
        }
    }
}

/// Why [`enter_user_namespace`] failed: each has its own fixes.
pub(super) enum UserNsError {
    /// unshare(CLONE_NEWUSER) refused: user namespaces are disabled or exhausted.
    Unavailable(io::Error),
    /// The helper could not write the id maps (newuidmap/newgidmap missing or refusing).
    Maps(String),
    Other(io::Error),
}

impl From<io::Error> for UserNsError {
    fn from(e: io::Error) -> Self {
        UserNsError::Other(e)
    }
}

/// unshare(NEWUSER) for an unprivileged run, the id maps written from outside by a helper
/// child (see the module doc), then uid and gid 0 inside.
pub(super) fn enter_user_namespace(
    uid_map: &[IdMap],
    gid_map: &[IdMap],
) -> Result<(), UserNsError> {
    // SAFETY: plain syscalls.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let (go_r, go_w) = pipe()?;
    let (result_r, result_w) = pipe()?;
    // SAFETY: the process is single-threaded (module invariant).
    let helper = unsafe { libc::fork() };
    if helper < 0 {
        return Err(os_err("fork").into());
    }
    if helper == 0 {
        drop((go_w, result_r));
        let mut go = [0u8; 1];
        let mut code = 1;
        if std::fs::File::from(go_r).read_exact(&mut go).is_ok() {
            // SAFETY: plain syscall; the parent waits for this child, so it is still there.
            let parent = unsafe { libc::getppid() };
            code = match write_id_maps(parent, uid, gid, uid_map, gid_map) {
                Ok(()) => 0,
                Err(msg) => {
                    let _ = std::fs::File::from(result_w).write_all(msg.as_bytes());
                    1
                }
            };
        }
        // SAFETY: leaving the helper without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    drop((go_r, result_w));
    // SAFETY: plain syscall.
    let unshared = check(
        unsafe { libc::unshare(libc::CLONE_NEWUSER) },
        "unshare(CLONE_NEWUSER)",
    );
    // Without the go-ahead (unshare failed) the helper exits at once.
    let mut go = std::fs::File::from(go_w);
    if unshared.is_ok() {
        go.write_all(b"1")?;
    }
    drop(go);
    let mut msg = String::new();
    std::fs::File::from(result_r).read_to_string(&mut msg)?;
    let mut status = 0;
    // SAFETY: valid out pointer; `helper` is our child.
    if unsafe { libc::waitpid(helper, &mut status, 0) } < 0 {
        return Err(os_err("waitpid(id map helper)").into());
    }
    unshared.map_err(UserNsError::Unavailable)?;
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(UserNsError::Maps(if msg.is_empty() {
            "the id map helper failed".to_string()
        } else {
            msg
        }));
    }
    become_root(gid_map)?;
    Ok(())
}

/// For a process an in-place upgrade started: joins the user namespace `ns` of the daemon it
/// takes over from (an unprivileged process has every capability in a user namespace its
/// own uid created), with the same ids as that daemon (its maps are the namespace's).
pub(super) fn join_user_namespace(ns: &OwnedFd, gid_map: &[IdMap]) -> io::Result<()> {
    // SAFETY: plain syscall on an fd we hold; the process is single-threaded (setns of a
    // user namespace refuses a multithreaded caller).
    check(
        unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWUSER) },
        "setns(the old daemon's user namespace)",
    )?;
    become_root(gid_map)
}

/// Takes uid and gid 0 inside the user namespace just entered.
fn become_root(gid_map: &[IdMap]) -> io::Result<()> {
    // SAFETY: plain syscalls on this (only) thread's credentials.
    unsafe {
        if !gid_map.is_empty() {
            // newgidmap leaves setgroups allowed: drop the caller's supplementary groups.
            check(libc::setgroups(0, std::ptr::null()), "setgroups")?;
        }
        check(libc::setresgid(0, 0, 0), "setresgid(0): gid 0 not mapped")?;
        check(libc::setresuid(0, 0, 0), "setresuid(0): uid 0 not mapped")
    }
}

/// Writes the id maps of `pid`'s user namespace. Without a map the caller's id becomes 0 (a
/// single-id map an unprivileged process may write itself, with setgroups denied); ranges
/// need the setuid helpers `newuidmap`/`newgidmap` (package `uidmap`, `/etc/subuid`).
fn write_id_maps(
    pid: libc::pid_t,
    uid: u32,
    gid: u32,
    uid_map: &[IdMap],
    gid_map: &[IdMap],
) -> Result<(), String> {
    let proc = |file: &str, data: String| {
        std::fs::write(format!("/proc/{pid}/{file}"), data)
            .map_err(|e| format!("writing /proc/{pid}/{file}: {e}"))
    };
    if uid_map.is_empty() {
        proc("uid_map", format!("0 {uid} 1"))?;
    } else {
        run_map_tool("newuidmap", pid, uid_map)?;
    }
    if gid_map.is_empty() {
        proc("setgroups", "deny".into())?;
        proc("gid_map", format!("0 {gid} 1"))
    } else {
        run_map_tool("newgidmap", pid, gid_map)
    }
}

fn run_map_tool(tool: &str, pid: libc::pid_t, map: &[IdMap]) -> Result<(), String> {
    let mut cmd = std::process::Command::new(tool);
    cmd.arg(pid.to_string());
    for m in map {
        cmd.args([m.inside, m.outside, m.count].map(|n| n.to_string()));
    }
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {tool} (package uidmap), which id ranges need: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(format!(
        "{tool} failed ({}): {}",
        out.status,
        stderr.trim().replace('\n', "; ")
    ))
}
