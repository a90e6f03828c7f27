//! `vhostfs stats`: finds a running daemon's metrics endpoint and prints its table.
//!
//! An operator names the daemon by its metrics address, or by what they know of it anyway: its
//! vhost-user socket (the pid file `<socket>.pid` beside it names the daemon), its pid file, or
//! its pid (`systemctl show -P MainPID vhostfs@NAME`). From a pid, the endpoint is the
//! `--metrics` value of the daemon's command line (`/proc/PID/cmdline`; a relative UNIX socket
//! path is relative to its working directory, `/proc/PID/cwd`). Under `--sandbox=namespace` the
//! pid file names the supervisor, which has the same command line and working directory.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::cli::{MetricsAddr, StatsTarget};
use crate::pid_file::PidFile;

const TIMEOUT: Duration = Duration::from_secs(5);

/// The `--metrics` address in the command line of process `pid`.
fn addr_of_pid(pid: u32) -> Result<MetricsAddr, String> {
    let cmdline =
        std::fs::read(format!("/proc/{pid}/cmdline")).map_err(|e| format!("process {pid}: {e}"))?;
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    // The last one wins, as clap takes it.
    let mut value = None;
    for (i, a) in args.iter().enumerate() {
        if let Some(v) = a.strip_prefix("--metrics=") {
            value = Some(v.to_string());
        } else if a == "--metrics" {
            value = args.get(i + 1).cloned();
        }
    }
    let value = value.ok_or_else(|| {
        format!("process {pid} was not started with --metrics (its metrics are not served)")
    })?;
    let addr: MetricsAddr = value
        .parse()
        .map_err(|e| format!("process {pid}: --metrics {value}: {e}"))?;
    Ok(match addr {
        MetricsAddr::Unix(p) if p.is_relative() => {
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
                .map_err(|e| format!("process {pid}: its working directory: {e}"))?;
            MetricsAddr::Unix(cwd.join(p))
        }
        a => a,
    })
}

fn pid_in(file: &Path) -> Result<u32, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{}: no pid in it", file.display()))
}

/// The metrics address of `target`.
fn resolve(target: &StatsTarget) -> Result<MetricsAddr, String> {
    match target {
        StatsTarget::Metrics(a) => Ok(a.clone()),
        StatsTarget::Pid(pid) => addr_of_pid(*pid),
        StatsTarget::PidFile(f) => addr_of_pid(pid_in(f)?),
        StatsTarget::Socket(s) => addr_of_pid(pid_in(&PidFile::path_for(s))?),
    }
}

/// `GET path` from `addr`: the body of a 200 answer.
pub fn get(addr: &MetricsAddr, path: &str) -> Result<String, String> {
    fn exchange(mut s: impl Read + Write, path: &str) -> std::io::Result<String> {
        write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)?;
        Ok(answer)
    }
    let answer = match addr {
        MetricsAddr::Unix(p) => UnixStream::connect(p).and_then(|s| {
            s.set_read_timeout(Some(TIMEOUT))?;
            exchange(s, path)
        }),
        MetricsAddr::Tcp(a) => TcpStream::connect_timeout(a, TIMEOUT).and_then(|s| {
            s.set_read_timeout(Some(TIMEOUT))?;
            exchange(s, path)
        }),
    }
    .map_err(|e| format!("{addr}: {e}"))?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}: not an HTTP answer"))?;
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("{addr}: {status}"));
    }
    Ok(body.to_string())
}

/// Prints the table of the daemon `target` names.
pub fn run(target: &StatsTarget) -> Result<(), String> {
    let addr = resolve(target)?;
    print!("{}", get(&addr, "/stats")?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn a_process_without_metrics_is_named() {
        let e = addr_of_pid(std::process::id()).unwrap_err();
        assert!(e.contains("was not started with --metrics"), "{e}");
        let e = resolve(&StatsTarget::PidFile(PathBuf::from("/nonexistent.pid"))).unwrap_err();
        assert!(e.starts_with("/nonexistent.pid: "), "{e}");
    }
}
