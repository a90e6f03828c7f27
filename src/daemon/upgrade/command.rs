//! `vhostfs upgrade`: finds the daemon (its pid file, or a pid), sends it SIGHUP with a nonce
//! (`sigqueue`), and waits on the abstract datagram socket `vhostfs-upgrade-<our pid>` for the
//! outcome, which the daemon's launcher (failure) or the new process's (success) sends.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Instant;

use super::launcher::report_name;

use crate::cli::{UpgradeDaemon, UpgradeTarget};
use crate::pid_file::PidFile;

/// The pid in `<socket>.pid`.
fn pid_in_file(socket: &std::path::Path) -> Result<u32, String> {
    let file = PidFile::path_for(socket);
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{}: no pid in it", file.display()))
}

/// Sends SIGHUP with `nonce` as its value.
fn sigqueue(pid: u32, nonce: u32) -> std::io::Result<()> {
    let value = libc::sigval {
        sival_ptr: nonce as usize as *mut libc::c_void,
    };
    // SAFETY: sigqueue with integer arguments and a value passed by copy.
    if unsafe { libc::sigqueue(pid as libc::pid_t, libc::SIGHUP, value) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Upgrades the daemon `target` names; `Ok` with the new process's pid once it serves.
pub fn run(target: &UpgradeTarget) -> Result<u32, String> {
    let pid = match &target.daemon {
        UpgradeDaemon::Socket(s) => pid_in_file(s)?,
        UpgradeDaemon::Pid(p) => *p,
    };
    let addr = SocketAddr::from_abstract_name(report_name(std::process::id()).as_bytes())
        .map_err(|e| e.to_string())?;
    let sock = UnixDatagram::bind_addr(&addr).map_err(|e| format!("report socket: {e}"))?;
    let nonce = std::collections::hash_map::RandomState::new();
    let nonce = std::hash::BuildHasher::hash_one(&nonce, pid) as u32;
    sigqueue(pid, nonce).map_err(|e| format!("cannot signal pid {pid}: {e}"))?;
    let deadline = Instant::now() + target.timeout;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no answer from pid {pid} within {:?} (is it vhostfs? its log says more)",
                target.timeout
            ));
        }
        sock.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(format!("report socket: {e}")),
        };
        if n < 4 || buf[..4] != nonce.to_le_bytes() {
            continue;
        }
        let text = String::from_utf8_lossy(&buf[4..n]).into_owned();
        if let Some(why) = text.strip_prefix("error ") {
            return Err(format!("pid {pid} serves on: {why}"));
        }
        let new: u32 = text
            .strip_prefix("ok ")
            .and_then(|p| p.trim().parse().ok())
            .ok_or_else(|| format!("an answer that makes no sense: {text:?}"))?;
        if let UpgradeDaemon::Socket(s) = &target.daemon {
            let named = pid_in_file(s)?;
            if named != new {
                return Err(format!(
                    "pid {new} took over but the pid file names {named}"
                ));
            }
        }
        return Ok(new);
    }
}
