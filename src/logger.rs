//! Logging to stderr (virtiofsd's env_logger-like lines) or to syslog.
//!
//! On stderr each record is one line, `[2024-05-01T12:34:56Z INFO  vhostfs] message`, where
//! `vhostfs` is the record's target (the module path, e.g. `vhostfs::cli`). With `--syslog`
//! records go to the local syslog, facility `daemon`, identity `vhostfs`.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// The socket records go to syslog through, if they do: a process that closes the fds it does
/// not use keeps this one.
static SYSLOG_FD: OnceLock<RawFd> = OnceLock::new();

/// The fd the logger writes through besides stderr (its syslog socket), if any.
pub fn fd() -> Option<RawFd> {
    SYSLOG_FD.get().copied()
}

/// Installs the process-wide logger.
///
/// `level` is the most verbose level that is emitted. With `syslog`, records go to the local
/// syslog daemon; if it cannot be reached, logging falls back to stderr and a warning saying
/// so is logged (as virtiofsd does). Fails only if a logger is already installed.
pub fn init(level: log::LevelFilter, syslog: bool) -> Result<(), String> {
    let fallback = if syslog {
        let formatter = syslog::Formatter3164 {
            facility: syslog::Facility::LOG_DAEMON,
            hostname: None,
            process: "vhostfs".into(),
            pid: std::process::id(),
        };
        match syslog::unix(formatter) {
            Ok(writer) => {
                let fd = match &writer.backend {
                    syslog::LoggerBackend::Unix(s) => Some(s.as_raw_fd()),
                    syslog::LoggerBackend::UnixStream(s) => Some(s.get_ref().as_raw_fd()),
                    syslog::LoggerBackend::Udp(s, _) => Some(s.as_raw_fd()),
                    syslog::LoggerBackend::Tcp(s) => Some(s.get_ref().as_raw_fd()),
                };
                if let Some(fd) = fd {
                    let _ = SYSLOG_FD.set(fd);
                }
                install(Box::new(syslog::BasicLogger::new(writer)), level)?;
                return Ok(());
            }
            Err(e) => Some(e.to_string()),
        }
    } else {
        None
    };
    install(Box::new(StreamLogger::new(level, io::stderr())), level)?;
    if let Some(error) = fallback {
        log::warn!("can't enable syslog: {error}");
    }
    Ok(())
}

fn install(logger: Box<dyn log::Log>, level: log::LevelFilter) -> Result<(), String> {
    log::set_boxed_logger(logger).map_err(|e| format!("cannot install the logger: {e}"))?;
    log::set_max_level(level);
    Ok(())
}

/// A [`log::Log`] writing one formatted line per record to a stream (stderr in the daemon).
pub struct StreamLogger<W: Write + Send> {
    level: log::LevelFilter,
    out: Mutex<W>,
}

impl<W: Write + Send> StreamLogger<W> {
    /// A logger emitting records up to `level` to `out`.
    pub fn new(level: log::LevelFilter, out: W) -> Self {
        StreamLogger {
            level,
            out: Mutex::new(out),
        }
    }

    /// Gives the stream back (used by tests to read what was written).
    pub fn into_inner(self) -> W {
        self.out
            .into_inner()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl<W: Write + Send> log::Log for StreamLogger<W> {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= self.level
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = format_line(
            SystemTime::now(),
            record.level(),
            record.target(),
            record.args(),
        );
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        // A log line that cannot be written has nowhere else to go.
        let _ = out.write_all(line.as_bytes());
    }

    fn flush(&self) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = out.flush();
    }
}

/// Formats one stderr line: `[<RFC 3339 UTC, seconds> <LEVEL padded to 5> <target>] <msg>\n`.
pub fn format_line(
    now: SystemTime,
    level: log::Level,
    target: &str,
    args: &std::fmt::Arguments,
) -> String {
    format!("[{} {level:<5} {target}] {args}\n", rfc3339_seconds(now))
}

/// Formats `t` as `YYYY-MM-DDThh:mm:ssZ` (UTC); times before 1970 print as the epoch.
pub fn rfc3339_seconds(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86400, secs % 86400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Converts days since 1970-01-01 to a (year, month, day) of the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`, restricted to dates from 1970 on).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use log::Log;
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn timestamps() {
        assert_eq!(rfc3339_seconds(at(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_seconds(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_seconds(at(1_709_251_199)), "2024-02-29T23:59:59Z");
        assert_eq!(rfc3339_seconds(at(1_735_689_600)), "2025-01-01T00:00:00Z");
        assert_eq!(rfc3339_seconds(at(4_107_542_400)), "2100-03-01T00:00:00Z");
        assert_eq!(
            rfc3339_seconds(UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn line_format() {
        let line = format_line(
            at(1_735_689_600),
            log::Level::Info,
            "vhostfs",
            &format_args!("Waiting for vhost-user socket connection..."),
        );
        assert_eq!(
            line,
            "[2025-01-01T00:00:00Z INFO  vhostfs] Waiting for vhost-user socket connection...\n"
        );
        let warn = format_line(at(0), log::Level::Warn, "vhostfs::cli", &format_args!("x"));
        assert_eq!(warn, "[1970-01-01T00:00:00Z WARN  vhostfs::cli] x\n");
    }

    fn emit(logger: &StreamLogger<Vec<u8>>, level: log::Level, msg: &str) {
        logger.log(
            &log::Record::builder()
                .level(level)
                .target("vhostfs")
                .args(format_args!("{msg}"))
                .build(),
        );
    }

    #[test]
    fn filters_by_level() {
        let logger = StreamLogger::new(log::LevelFilter::Info, Vec::new());
        emit(&logger, log::Level::Debug, "hidden");
        emit(&logger, log::Level::Info, "shown");
        emit(&logger, log::Level::Error, "also shown");
        logger.flush();
        let text = String::from_utf8(logger.into_inner()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].ends_with(" INFO  vhostfs] shown"), "{text}");
        assert!(lines[1].ends_with(" ERROR vhostfs] also shown"), "{text}");
    }

    #[test]
    fn init_installs_once() {
        assert_eq!(init(log::LevelFilter::Warn, false), Ok(()));
        assert_eq!(log::max_level(), log::LevelFilter::Warn);
        let again = init(log::LevelFilter::Info, false).unwrap_err();
        assert!(again.starts_with("cannot install the logger"), "{again}");
    }

    #[test]
    fn off_emits_nothing() {
        let logger = StreamLogger::new(log::LevelFilter::Off, Vec::new());
        emit(&logger, log::Level::Error, "hidden");
        assert!(logger.into_inner().is_empty());
    }
}
