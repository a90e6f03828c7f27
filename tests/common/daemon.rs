//! Running daemons under test, and commands with a timeout.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// How long [`Daemon::spawn`] waits for the socket to appear.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(10);

/// A daemon process, killed (SIGKILL) and reaped on drop.
pub struct Daemon {
    child: Child,
}

impl Daemon {
    /// Spawn `cmd` and wait (up to 10 s) until `socket` exists and is not bound without
    /// listening (virtiofsd's socket file exists a moment before it listens, and a connect in
    /// that window is refused); fails if the process exits first.
    pub fn spawn(cmd: &mut Command, socket: &Path) -> io::Result<Daemon> {
        Daemon::spawn_polling(cmd, socket, Duration::from_millis(10))
    }

    /// [`Daemon::spawn`], looking for the listening socket every `every`.
    pub fn spawn_polling(cmd: &mut Command, socket: &Path, every: Duration) -> io::Result<Daemon> {
        let child = cmd
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("spawn {:?}: {e}", cmd.get_program())))?;
        let mut daemon = Daemon { child };
        let deadline = Instant::now() + SOCKET_TIMEOUT;
        while !socket.exists() || bound_not_listening(socket) {
            if let Some(status) = daemon.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "{:?} exited with {status} before creating {}",
                    cmd.get_program(),
                    socket.display()
                )));
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} did not appear within {SOCKET_TIMEOUT:?}",
                        socket.display()
                    ),
                ));
            }
            std::thread::sleep(every);
        }
        Ok(daemon)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running (not exited, not a zombie we reaped).
    pub fn is_alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Wait up to `timeout` for the process to exit; returns its status if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> io::Result<Option<ExitStatus>> {
        wait_timeout(&mut self.child, timeout)
    }

    /// The host pid of the process serving requests: under `--sandbox=namespace` the spawned
    /// process is a supervisor and serving happens in its only child; else the process itself
    /// (whose child, if any, is the upgrade launcher, named `vhostfs-launch`).
    pub fn served_pid(&self) -> io::Result<u32> {
        let pid = self.pid();
        let children = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))?;
        for child in children.split_whitespace() {
            let comm = fs::read_to_string(format!("/proc/{child}/comm")).unwrap_or_default();
            if comm.trim() != "vhostfs-launch" {
                return child.parse().map_err(io::Error::other);
            }
        }
        Ok(pid)
    }

    /// Number of open file descriptors of the serving process (entries in /proc/PID/fd).
    pub fn fd_count(&self) -> io::Result<usize> {
        Ok(fs::read_dir(format!("/proc/{}/fd", self.served_pid()?))?.count())
    }

    /// Resident set size of the serving process (VmRSS of /proc/PID/status) in bytes.
    pub fn rss_bytes(&self) -> io::Result<u64> {
        let status = fs::read_to_string(format!("/proc/{}/status", self.served_pid()?))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
            .ok_or_else(|| io::Error::other("no VmRSS in /proc/PID/status"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether /proc/net/unix lists a socket bound at `socket` that does not listen yet, and none
/// that listens there. A socket it does not list (one of another network namespace) counts as
/// listening: nothing to wait for. Connections (state other than unconnected) are left out.
fn bound_not_listening(socket: &Path) -> bool {
    /// `__SO_ACCEPTCON` in the Flags column: the socket listens.
    const ACCEPTCON: u32 = 0x0001_0000;
    /// `SS_UNCONNECTED` in the St column.
    const UNCONNECTED: &str = "01";
    let Ok(table) = fs::read_to_string("/proc/net/unix") else {
        return false;
    };
    let (mut bound, mut listening) = (false, false);
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 || Path::new(fields[7]) != socket || fields[5] != UNCONNECTED {
            continue;
        }
        match u32::from_str_radix(fields[3], 16) {
            Ok(flags) if flags & ACCEPTCON != 0 => listening = true,
            Ok(_) => bound = true,
            Err(_) => {}
        }
    }
    bound && !listening
}

/// Wait up to `timeout` for `child` to exit; returns its status if it did.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How a command run by [`run_with_timeout`] ended.
pub struct Outcome {
    pub status: ExitStatus,
    /// What it wrote to stdout, if that was piped (else empty).
    pub stdout: String,
    /// What it wrote to stderr, if that was piped (else empty).
    pub stderr: String,
}

/// Runs `cmd`, with the stdio its caller set up, to its exit and collects the output of its
/// piped stdout and stderr; `None` if it was still running after `timeout` (it is then killed).
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Option<Outcome> {
    let mut child = cmd.spawn().expect("spawn");
    let Some(status) = wait_timeout(&mut child, timeout).unwrap() else {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    };
    fn read_all(pipe: Option<impl Read>) -> String {
        let mut s = String::new();
        if let Some(mut pipe) = pipe {
            pipe.read_to_string(&mut s).unwrap();
        }
        s
    }
    Some(Outcome {
        status,
        stdout: read_all(child.stdout.take()),
        stderr: read_all(child.stderr.take()),
    })
}

/// The reference virtiofsd: `$VIRTIOFSD`, else `virtiofsd` on PATH, else ~/.cargo/bin/virtiofsd.
pub fn virtiofsd_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("VIRTIOFSD") {
        return Some(PathBuf::from(p));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("virtiofsd"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let p = PathBuf::from(std::env::var_os("HOME")?).join(".cargo/bin/virtiofsd");
        p.is_file().then_some(p)
    })
}

/// Start the reference virtiofsd sharing `shared` on `socket` (sandbox none: run as root, unless
/// `extra` names a `--sandbox`), with `extra` arguments (e.g. `--xattr`).
pub fn spawn_virtiofsd(socket: &Path, shared: &Path, extra: &[&str]) -> io::Result<Daemon> {
    let bin = virtiofsd_path().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "virtiofsd not found: set $VIRTIOFSD, put it on PATH or run \
             `cargo install virtiofsd --version 1.14.0` (see .ci/setup.sh)",
        )
    })?;
    let mut cmd = Command::new(bin);
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.display()))
        .arg("--log-level=error")
        .args(extra);
    if !extra.iter().any(|a| a.starts_with("--sandbox")) {
        cmd.arg("--sandbox=none");
    }
    Daemon::spawn(&mut cmd, socket)
}

/// Start vhostfs (the binary of this crate) sharing `shared` on `socket`, with `extra` arguments.
pub fn spawn_vhostfs(socket: &Path, shared: &Path, extra: &[&str]) -> io::Result<Daemon> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.arg(format!("--socket-path={}", socket.display()))
        .arg(format!("--shared-dir={}", shared.display()))
        .args(extra);
    Daemon::spawn(&mut cmd, socket)
}
