//! What the benches share besides the test guest: the daemon command lines they start, and the
//! machine description of their reports.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::Daemon;

/// A daemon command line: the program and its arguments; `--socket-path` and `--shared-dir` are
/// appended per run.
pub struct DaemonCmd {
    pub program: String,
    pub args: Vec<String>,
}

impl DaemonCmd {
    /// From a whitespace-separated command line.
    pub fn new(cmd: &str) -> Result<DaemonCmd, String> {
        let mut words = cmd.split_whitespace().map(str::to_owned);
        let program = words.next().ok_or("empty daemon command")?;
        Ok(DaemonCmd {
            program,
            args: words.collect(),
        })
    }

    pub fn command_line(&self) -> String {
        std::iter::once(self.program.as_str())
            .chain(self.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The program's file name (`vhostfs`, `virtiofsd`).
    pub fn name(&self) -> String {
        Path::new(&self.program)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.program.clone())
    }

    /// Start it on `share`; its stderr goes to `log`.
    pub fn spawn(&self, socket: &Path, share: &Path, log: &Path) -> Result<Daemon, String> {
        self.spawn_polling(socket, share, log, Duration::from_millis(10))
    }

    /// [`DaemonCmd::spawn`], looking for the listening socket every `every`.
    pub fn spawn_polling(
        &self,
        socket: &Path,
        share: &Path,
        log: &Path,
        every: Duration,
    ) -> Result<Daemon, String> {
        let log = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .arg(format!("--socket-path={}", socket.display()))
            .arg(format!("--shared-dir={}", share.display()))
            .stdout(Stdio::null())
            .stderr(log);
        Daemon::spawn_polling(&mut cmd, socket, every).map_err(|e| e.to_string())
    }
}

/// `N cores (CPU model), Linux VERSION`.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores ({cpu}), Linux {}", kernel.trim())
}

/// The type of the filesystem holding `path`.
pub fn fs_type(path: &Path) -> String {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return "unknown filesystem".to_owned();
    };
    // SAFETY: statfs fills the zeroed struct; `c` is a valid NUL-terminated path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return "unknown filesystem".to_owned();
    }
    match st.f_type {
        libc::TMPFS_MAGIC => "tmpfs".to_owned(),
        libc::EXT4_SUPER_MAGIC => "ext4".to_owned(),
        libc::XFS_SUPER_MAGIC => "xfs".to_owned(),
        libc::BTRFS_SUPER_MAGIC => "btrfs".to_owned(),
        t => format!("filesystem type {t:#x}"),
    }
}

/// `YYYY-MM-DD HH:MM UTC`.
pub fn today() -> String {
    Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%d %H:%M UTC")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// User + system CPU time (utime + stime of /proc/PID/stat, which count every thread, exited ones
/// too) of `pid` and its descendants; clock-tick resolution (10 ms).
pub fn tree_cpu(pid: u32) -> Duration {
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let mut ticks = 0u64;
    let mut todo = vec![pid.to_string()];
    while let Some(p) = todo.pop() {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
            // Fields after the command's closing parenthesis; utime and stime are 14 and 15.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let f: Vec<&str> = rest.split_whitespace().collect();
            ticks += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            ticks += f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
        let tasks = std::fs::read_dir(format!("/proc/{p}/task"))
            .into_iter()
            .flatten();
        for t in tasks.flatten() {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            todo.extend(kids.split_whitespace().map(str::to_owned));
        }
    }
    Duration::from_secs_f64(ticks as f64 / hz)
}

/// The CPU time of a daemon's process tree at one moment, for [`CpuSample::since`].
pub struct CpuSample {
    /// Run time (ns, the first field of /proc/PID/task/TID/schedstat) of every live thread.
    threads: HashMap<u32, u64>,
    /// [`tree_cpu`]: exited threads included, at clock-tick resolution.
    ticks: Duration,
}

impl CpuSample {
    /// Samples `pid` and its descendants.
    pub fn of(pid: u32) -> CpuSample {
        let mut threads = HashMap::new();
        let mut todo = vec![pid.to_string()];
        while let Some(p) = todo.pop() {
            let tasks = std::fs::read_dir(format!("/proc/{p}/task"))
                .into_iter()
                .flatten();
            for t in tasks.flatten() {
                let ns = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
                let ns = ns.split_whitespace().next().and_then(|v| v.parse().ok());
                let tid = t.file_name().to_string_lossy().parse().ok();
                if let (Some(tid), Some(ns)) = (tid, ns) {
                    threads.insert(tid, ns);
                }
                let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                todo.extend(kids.split_whitespace().map(str::to_owned));
            }
        }
        CpuSample {
            threads,
            ticks: tree_cpu(pid),
        }
    }

    /// CPU time used between `start` and this sample: per thread to the nanosecond, threads
    /// started in between counted whole; if a thread of `start` has exited (its time is then
    /// only in the tick counts), utime + stime at tick resolution.
    pub fn since(&self, start: &CpuSample) -> Duration {
        if start.threads.keys().any(|t| !self.threads.contains_key(t)) {
            return self.ticks.saturating_sub(start.ticks);
        }
        let ns = self
            .threads
            .iter()
            .map(|(t, &ns)| ns.saturating_sub(start.threads.get(t).copied().unwrap_or(0)))
            .sum();
        Duration::from_nanos(ns)
    }
}
