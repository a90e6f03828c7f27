//! The `vhostfs upgrade` command line: which daemon to upgrade in place, and how long to wait.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Command};

use super::subcommand::{option, socket_path};

/// Which daemon `vhostfs upgrade` hands over to a new process, and how long it waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeTarget {
    pub daemon: UpgradeDaemon,
    pub timeout: Duration,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpgradeDaemon {
    /// Its vhost-user socket: the pid file beside it names the daemon.
    Socket(PathBuf),
    /// The daemon's pid (systemd's `$MAINPID` in `ExecReload=`).
    Pid(u32),
}

fn command() -> Command {
    Command::new("vhostfs upgrade")
        .about(
            "Hand a running vhostfs's session over to a new process of its binary (SIGHUP) and \
             wait until that process serves; exit 0 then, or non-zero with the reason",
        )
        .disable_version_flag(true)
        .arg(socket_path())
        .arg(
            option("pid", "PID", "The daemon's pid (e.g. systemd's $MAINPID)")
                .value_parser(clap::value_parser!(u32)),
        )
        .arg(
            option(
                "timeout",
                "SECONDS",
                "How long to wait for the outcome [default: 60]",
            )
            .value_parser(clap::value_parser!(u64).range(1..)),
        )
        .group(
            ArgGroup::new("daemon")
                .args(["socket-path", "pid"])
                .required(true),
        )
}

/// Parses the arguments after `vhostfs upgrade`; `Err` carries clap's error.
pub(super) fn parse(
    args: impl IntoIterator<Item = OsString>,
) -> Result<UpgradeTarget, clap::Error> {
    let m = command().try_get_matches_from(args)?;
    let daemon = match m.get_one::<PathBuf>("socket-path") {
        Some(p) => UpgradeDaemon::Socket(p.clone()),
        None => UpgradeDaemon::Pid(*m.get_one::<u32>("pid").expect("the group is required")),
    };
    let secs = m.get_one::<u64>("timeout").copied().unwrap_or(60);
    Ok(UpgradeTarget {
        daemon,
        timeout: Duration::from_secs(secs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        ["vhostfs upgrade"]
            .iter()
            .chain(a)
            .map(OsString::from)
            .collect()
    }

    #[test]
    fn targets_and_timeout() {
        let t = parse(args(&["--socket-path=/run/a.sock"])).unwrap();
        assert_eq!(t.daemon, UpgradeDaemon::Socket("/run/a.sock".into()));
        assert_eq!(t.timeout, Duration::from_secs(60));
        let t = parse(args(&["--pid", "42", "--timeout=5"])).unwrap();
        assert_eq!(t.daemon, UpgradeDaemon::Pid(42));
        assert_eq!(t.timeout, Duration::from_secs(5));
        assert!(parse(args(&[])).is_err(), "a daemon must be named");
        assert!(parse(args(&["--pid=1", "--socket-path=/x"])).is_err());
        assert!(parse(args(&["--pid=1", "--timeout=0"])).is_err());
    }
}
