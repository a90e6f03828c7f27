//! `--metrics=unix:PATH|tcp:127.0.0.1:PORT` and the `vhostfs stats` subcommand's command line.

use std::ffi::OsString;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;

use clap::{ArgGroup, Command};

use super::subcommand::{option, socket_path};

/// Where the metrics are served (`--metrics`): a UNIX socket, or TCP on a loopback address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetricsAddr {
    /// `unix:PATH`: a socket created at PATH (as the vhost-user socket is).
    Unix(PathBuf),
    /// `tcp:ADDR:PORT` with a loopback ADDR (`127.0.0.0/8`, `[::1]` or `localhost`).
    Tcp(SocketAddr),
}

impl fmt::Display for MetricsAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetricsAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            MetricsAddr::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

impl FromStr for MetricsAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const EXPECTED: &str = "expected unix:PATH or tcp:127.0.0.1:PORT";
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(format!("{EXPECTED} (the path is empty)"));
            }
            return Ok(MetricsAddr::Unix(PathBuf::from(path)));
        }
        let Some(addr) = s.strip_prefix("tcp:") else {
            return Err(EXPECTED.into());
        };
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| format!("{EXPECTED} (no port)"))?;
        let port: u16 = match port.parse() {
            Ok(0) | Err(_) => return Err(format!("the port must be 1 to 65535, not '{port}'")),
            Ok(p) => p,
        };
        let ip: IpAddr = match host {
            "localhost" => Ipv4Addr::LOCALHOST.into(),
            _ => host
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(host)
                .parse()
                .map_err(|_| format!("'{host}' is not an IP address ({EXPECTED})"))?,
        };
        if !ip.is_loopback() {
            return Err(format!(
                "{ip} is not a loopback address: metrics are served on this host only \
                 (127.0.0.1, [::1]; put a proxy in front to export them)"
            ));
        }
        Ok(MetricsAddr::Tcp(SocketAddr::new(ip, port)))
    }
}

/// Which daemon `vhostfs stats` asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatsTarget {
    /// Its metrics address, as given to its `--metrics`.
    Metrics(MetricsAddr),
    /// Its vhost-user socket: the pid file beside it names the daemon, whose command line
    /// names the metrics address.
    Socket(PathBuf),
    /// A pid file (`<socket>.pid`) naming the daemon.
    PidFile(PathBuf),
    /// The daemon's pid (e.g. systemd's `MainPID`).
    Pid(u32),
}

/// The `vhostfs stats` command line.
fn stats_command() -> Command {
    Command::new("vhostfs stats")
        .about(
            "Print a table of a running vhostfs's metrics (it must run with --metrics); name the \
             daemon by one of the options",
        )
        .disable_version_flag(true)
        .arg(
            option(
                "metrics",
                "unix:PATH|tcp:127.0.0.1:PORT",
                "The daemon's --metrics address",
            )
            .value_parser(|s: &str| s.parse::<MetricsAddr>()),
        )
        .arg(socket_path())
        .arg(
            option("pid-file", "FILE", "The daemon's pid file")
                .value_parser(clap::value_parser!(PathBuf)),
        )
        .arg(
            option(
                "pid",
                "PID",
                "The daemon's pid (e.g. systemctl show -P MainPID vhostfs@NAME)",
            )
            .value_parser(clap::value_parser!(u32)),
        )
        .group(
            ArgGroup::new("daemon")
                .args(["metrics", "socket-path", "pid-file", "pid"])
                .required(true),
        )
}

/// Parses the arguments after `vhostfs stats`; `Err` carries clap's error, for its rendering
/// (help, or a one-line error).
pub(super) fn parse_stats(
    args: impl IntoIterator<Item = OsString>,
) -> Result<StatsTarget, clap::Error> {
    let m = stats_command().try_get_matches_from(args)?;
    Ok(if let Some(a) = m.get_one::<MetricsAddr>("metrics") {
        StatsTarget::Metrics(a.clone())
    } else if let Some(p) = m.get_one::<PathBuf>("socket-path") {
        StatsTarget::Socket(p.clone())
    } else if let Some(p) = m.get_one::<PathBuf>("pid-file") {
        StatsTarget::PidFile(p.clone())
    } else {
        StatsTarget::Pid(*m.get_one::<u32>("pid").expect("the group is required"))
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fail, parse, run};
    use super::*;
    use crate::cli::{Action, Config};

    #[test]
    fn metrics_addresses() {
        assert_eq!(run(&[]).metrics, None, "off by default");
        let addr = |v: &str| run(&[&format!("--metrics={v}")]).metrics.unwrap();
        assert_eq!(
            addr("unix:/run/vhostfs/m.sock"),
            MetricsAddr::Unix("/run/vhostfs/m.sock".into())
        );
        assert_eq!(
            addr("tcp:127.0.0.1:9100"),
            MetricsAddr::Tcp("127.0.0.1:9100".parse().unwrap())
        );
        assert_eq!(
            addr("tcp:127.1.2.3:9100"),
            MetricsAddr::Tcp("127.1.2.3:9100".parse().unwrap())
        );
        assert_eq!(
            addr("tcp:[::1]:9100"),
            MetricsAddr::Tcp("[::1]:9100".parse().unwrap())
        );
        assert_eq!(
            addr("tcp:localhost:9100"),
            MetricsAddr::Tcp("127.0.0.1:9100".parse().unwrap())
        );
        let Config { metrics, .. } = run(&["--metrics", "unix:m.sock"]);
        assert_eq!(metrics, Some(MetricsAddr::Unix("m.sock".into())));
        assert_eq!(addr("tcp:[::1]:9100").to_string(), "tcp:[::1]:9100");
    }

    #[test]
    fn bad_metrics_addresses_are_one_line_errors() {
        for (value, says) in [
            ("tcp:0.0.0.0:9100", "0.0.0.0 is not a loopback address"),
            (
                "tcp:192.168.1.5:9100",
                "192.168.1.5 is not a loopback address",
            ),
            ("tcp:[::]:9100", ":: is not a loopback address"),
            ("tcp:127.0.0.1", "(no port)"),
            ("tcp:127.0.0.1:0", "the port must be 1 to 65535, not '0'"),
            (
                "tcp:127.0.0.1:http",
                "the port must be 1 to 65535, not 'http'",
            ),
            ("tcp:example.org:80", "'example.org' is not an IP address"),
            ("unix:", "the path is empty"),
            ("/run/m.sock", "expected unix:PATH or tcp:127.0.0.1:PORT"),
            (
                "http://127.0.0.1:9100",
                "expected unix:PATH or tcp:127.0.0.1:PORT",
            ),
        ] {
            let e = fail(&[&format!("--metrics={value}")]);
            assert!(
                e.starts_with(&format!("invalid value '{value}' for '--metrics")),
                "{value}: {e}"
            );
            assert!(e.contains(says), "{value}: {e}");
        }
    }

    #[test]
    fn stats_targets() {
        let stats = |args: &[&str]| parse(&[&["stats"], args].concat());
        assert_eq!(
            stats(&["--socket-path", "/run/vm.sock"]),
            Ok(Action::Stats(StatsTarget::Socket("/run/vm.sock".into())))
        );
        assert_eq!(
            stats(&["--metrics=tcp:127.0.0.1:9100"]),
            Ok(Action::Stats(StatsTarget::Metrics(MetricsAddr::Tcp(
                "127.0.0.1:9100".parse().unwrap()
            ))))
        );
        assert_eq!(
            stats(&["--pid-file", "/run/vm.sock.pid"]),
            Ok(Action::Stats(StatsTarget::PidFile(
                "/run/vm.sock.pid".into()
            )))
        );
        assert_eq!(
            stats(&["--pid", "42"]),
            Ok(Action::Stats(StatsTarget::Pid(42)))
        );
        for bad in [
            &[][..],
            &["--pid", "42", "--socket-path", "/run/vm.sock"],
            &["--pid", "x"],
            &["--metrics", "tcp:10.0.0.1:9100"],
            &["--shared-dir", "/srv"],
        ] {
            let e = stats(bad).unwrap_err();
            assert!(!e.message().contains('\n'), "{bad:?}: {e:?}");
        }
        assert!(matches!(
            stats(&["--help"]),
            Ok(Action::Exit { code: 0, .. })
        ));
        // Only a first argument starts the subcommand: virtiofsd's command line is unchanged.
        assert!(parse(&["--shared-dir", "/srv", "stats"]).is_err());
    }
}
