//! A GlusterFS volume for a test (issue 35 item 2): `glusterd` started by hand (no systemd) with
//! its working and run directories in the test's temp dir, a replicated volume of two bricks
//! there, FUSE-mounted twice on this machine as "host A" and "host B". Dropping it unmounts both,
//! stops and deletes the volume, stops glusterd and whatever it started (bricks, self-heal
//! daemon), and removes the files they left outside the temp dir (brick sockets and logs).
//!
//! One at a time per test binary: [`Gluster::start`] takes a process-wide lock, held until the
//! drop. glusterd's port (24007) is the machine's, so two volumes of this harness cannot run at
//! once anyway; a fresh glusterd and volume per test (rather than one shared instance) means each
//! test starts from an empty volume and a GlusterFS client that has handed out no node IDs yet, and
//! that the teardown really runs (a `static`'s destructor never does). Cost, measured on 2 cores:
//! start-up 2.9-4.8 s (glusterd answering ~1.6 s, volume start ~1.3 s), teardown 2.2-2.4 s.
//!
//! Needs Debian's `glusterfs-server` and `glusterfs-client` (`.ci/setup` installs them): without
//! them [`Gluster::start`] panics saying so, it never skips.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::daemon::{run_with_timeout, wait_timeout};
use super::temp_dir::TempDir;

/// The volume's name (each volume lives in its own glusterd working dir).
pub const VOLUME: &str = "vhostfs";

/// Serializes the volumes of one test binary (see the module doc).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// glusterd's management port, fixed by the protocol (clients ask it for the volume file).
const GLUSTERD_PORT: u16 = 24007;

pub struct Gluster {
    /// The first mount of the volume ("host A").
    pub mount_a: PathBuf,
    /// The second mount of the same volume ("host B").
    pub mount_b: PathBuf,
    /// How long [`Gluster::start`] took, from spawning glusterd to both mounts answering.
    pub startup: Duration,
    dir: TempDir,
    glusterd: Option<Child>,
    created: bool,
    started: bool,
    mounted: Vec<PathBuf>,
    /// Processes glusterd or the mounts started (bricks, self-heal daemon, FUSE clients).
    spawned_pids: Vec<i32>,
    /// Files they create outside `dir` (brick sockets in /var/run/gluster, brick logs).
    outside_files: Vec<PathBuf>,
    /// Dropped last: the next volume may start once this one is gone.
    _serial: MutexGuard<'static, ()>,
}

/// `name` on PATH or in /usr/sbin (root's PATH may lack it), else a panic naming `.ci/setup`.
fn find_tool(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} not found: the GlusterFS tests need Debian's {package} \
                 (run .ci/setup as root; it installs glusterfs-server and glusterfs-client)"
            )
        })
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(rc, 0, "gethostname: {}", std::io::Error::last_os_error());
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The last lines of a log file, for a failure message.
fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Whether `dir` is a mount point of a fuse.glusterfs filesystem (per /proc/self/mountinfo).
fn is_glusterfs_mount(dir: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|&x| x == "-");
        f.len() > 4
            && Path::new(f[4]) == dir
            && sep.is_some_and(|s| f.get(s + 1) == Some(&"fuse.glusterfs"))
    })
}

/// The pid in a pid file, if it names a live process.
fn live_pid(pid_file: &Path) -> Option<i32> {
    let pid: i32 = fs::read_to_string(pid_file).ok()?.trim().parse().ok()?;
    // SAFETY: signal 0 only checks that the process exists.
    (pid > 0 && unsafe { libc::kill(pid, 0) } == 0).then_some(pid)
}

/// The values following `-S` and `-l` on a process's command line (its socket and log file).
fn socket_and_log_of(pid: i32) -> Vec<PathBuf> {
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    args.windows(2)
        .filter(|w| w[0] == "-S" || w[0] == "-l")
        .map(|w| PathBuf::from(&w[1]))
        .collect()
}

impl Gluster {
    /// glusterd, the volume `vhostfs` (replica 2, bricks `brick1` and `brick2` in a fresh temp
    /// dir), started, mounted at [`Gluster::mount_a`] and [`Gluster::mount_b`]. Panics with what
    /// failed (and the end of glusterd's log).
    pub fn start() -> Gluster {
        Gluster::start_with(&[])
    }

    /// [`Gluster::start`], with `gluster volume set` `options` (key, value) applied before the
    /// volume starts.
    pub fn start_with(options: &[(&str, &str)]) -> Gluster {
        let serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let glusterd_bin = find_tool("glusterd", "glusterfs-server");
        find_tool("gluster", "glusterfs-server");
        find_tool("glusterfs", "glusterfs-client");
        if std::net::TcpListener::bind(("0.0.0.0", GLUSTERD_PORT)).is_err() {
            panic!(
                "port {GLUSTERD_PORT} is taken: another glusterd runs on this machine \
                 (`ss -ltnp sport = :{GLUSTERD_PORT}`); stop it, the tests start their own"
            );
        }
        let dir = TempDir::new("gluster").unwrap();
        for sub in ["wd", "run", "log", "brick1", "brick2", "a", "b"] {
            fs::create_dir(dir.join(sub)).unwrap();
        }
        let volfile = dir.join("glusterd.vol");
        fs::write(
            &volfile,
            format!(
                "volume management\n\
                 \x20   type mgmt/glusterd\n\
                 \x20   option working-directory {wd}\n\
                 \x20   option run-directory {run}\n\
                 \x20   option glusterd-sockfile {run}/glusterd.socket\n\
                 \x20   option transport-type socket\n\
                 \x20   option transport.socket.listen-port {GLUSTERD_PORT}\n\
                 \x20   option ping-timeout 0\n\
                 \x20   option event-threads 1\n\
                 end-volume\n",
                wd = dir.join("wd").display(),
                run = dir.join("run").display(),
            ),
        )
        .unwrap();
        let t0 = Instant::now();
        let glusterd = Command::new(&glusterd_bin)
            .arg("-N")
            .arg("-f")
            .arg(&volfile)
            .arg("-p")
            .arg(dir.join("run/glusterd.pid"))
            .arg("-l")
            .arg(dir.join("log/glusterd.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join("log/glusterd.stderr")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", glusterd_bin.display()));
        let mut g = Gluster {
            mount_a: dir.join("a"),
            mount_b: dir.join("b"),
            startup: Duration::ZERO,
            dir,
            glusterd: Some(glusterd),
            created: false,
            started: false,
            mounted: Vec::new(),
            spawned_pids: Vec::new(),
            outside_files: Vec::new(),
            _serial: serial,
        };
        g.wait_for_glusterd();
        let host = hostname();
        let bricks: Vec<String> = ["brick1", "brick2"]
            .iter()
            .map(|b| format!("{host}:{}", g.dir.join(b).display()))
            .collect();
        // `force`: the bricks are on the root filesystem; --mode=script answers the replica-2
        // split-brain question with yes.
        g.cli_ok(
            &[
                &["volume", "create", VOLUME, "replica", "2"][..],
                &[&bricks[0], &bricks[1], "force"],
            ]
            .concat(),
        );
        g.created = true;
        for (key, value) in options {
            g.cli_ok(&["volume", "set", VOLUME, key, value]);
        }
        g.cli_ok(&["volume", "start", VOLUME]);
        g.started = true;
        g.note_volume_processes();
        for m in [g.mount_a.clone(), g.mount_b.clone()] {
            g.mount(&m);
        }
        g.wait_until_replicated();
        g.startup = t0.elapsed();
        eprintln!(
            "gluster: volume {VOLUME} (replica 2) up and mounted twice in {:.2?}",
            g.startup
        );
        g
    }

    /// The temp dir holding glusterd's state, the bricks and both mount points.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A fresh directory `name` on mount A (the share) and the same directory seen on mount B.
    pub fn share_dirs(&self, name: &str) -> (PathBuf, PathBuf) {
        let a = self.mount_a.join(name);
        fs::create_dir(&a).unwrap();
        (a, self.mount_b.join(name))
    }

    fn cli(&self, args: &[&str]) -> Option<super::daemon::Outcome> {
        let mut cmd = Command::new("gluster");
        cmd.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .arg(format!(
                "--glusterd-sock={}",
                self.dir.join("run/glusterd.socket").display()
            ))
            .arg(format!(
                "--log-file={}",
                self.dir.join("log/cli.log").display()
            ))
            .arg("--mode=script")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        run_with_timeout(&mut cmd, Duration::from_secs(60))
    }

    fn cli_ok(&self, args: &[&str]) {
        match self.cli(args) {
            Some(o) if o.status.success() => {}
            Some(o) => panic!(
                "gluster {}: {}{}\nglusterd log:\n{}",
                args.join(" "),
                o.stdout,
                o.stderr,
                tail(&self.dir.join("log/glusterd.log"), 20)
            ),
            None => panic!("gluster {}: no answer within 60 s", args.join(" ")),
        }
    }

    fn wait_for_glusterd(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.glusterd.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "glusterd exited with {status} at start-up:\n{}\n{}",
                    tail(&self.dir.join("log/glusterd.stderr"), 10),
                    tail(&self.dir.join("log/glusterd.log"), 20)
                );
            }
            if self
                .cli(&["volume", "list"])
                .is_some_and(|o| o.status.success())
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "glusterd did not answer within 30 s:\n{}",
                tail(&self.dir.join("log/glusterd.log"), 20)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Records the bricks' and the self-heal daemon's pids, sockets and logs (they live on
    /// outside the temp dir otherwise).
    fn note_volume_processes(&mut self) {
        let mut pid_files = Vec::new();
        for sub in [format!("run/vols/{VOLUME}"), format!("run/shd/{VOLUME}")] {
            if let Ok(entries) = fs::read_dir(self.dir.join(&sub)) {
                pid_files.extend(
                    entries
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| p.extension().is_some_and(|x| x == "pid")),
                );
            }
        }
        for pid_file in pid_files {
            if let Some(pid) = live_pid(&pid_file) {
                self.spawned_pids.push(pid);
                self.outside_files.extend(
                    socket_and_log_of(pid)
                        .into_iter()
                        .filter(|p| !p.starts_with(self.dir.path()))
                        // The self-heal daemon's log is shared by every volume of the machine.
                        .filter(|p| !p.ends_with("glustershd.log")),
                );
            }
        }
    }

    fn mount(&mut self, at: &Path) {
        let name = at.file_name().unwrap().to_string_lossy().into_owned();
        let pid_file = self.dir.join(&format!("run/mount-{name}.pid"));
        let mut cmd = Command::new("glusterfs");
        cmd.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .arg("--volfile-server=127.0.0.1")
            .arg(format!("--volfile-id={VOLUME}"))
            .arg("-l")
            .arg(self.dir.join(&format!("log/mount-{name}.log")))
            .arg("-p")
            .arg(&pid_file)
            .arg(at)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let out = run_with_timeout(&mut cmd, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("glusterfs mount on {}: no answer in 30 s", at.display()));
        assert!(
            out.status.success(),
            "glusterfs mount on {}: {}{}",
            at.display(),
            out.stdout,
            out.stderr
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while !is_glusterfs_mount(at) {
            assert!(
                Instant::now() < deadline,
                "{} is not a glusterfs mount 10 s after glusterfs returned:\n{}",
                at.display(),
                tail(&self.dir.join(&format!("log/mount-{name}.log")), 20)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.mounted.push(at.to_path_buf());
        if let Some(pid) = live_pid(&pid_file) {
            self.spawned_pids.push(pid);
        }
    }

    /// A file written through A reads back through B (both clients connected to both bricks).
    fn wait_until_replicated(&self) {
        let probe = ".gluster-harness-probe";
        fs::write(self.mount_a.join(probe), "probe").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while fs::read(self.mount_b.join(probe)).ok().as_deref() != Some(b"probe") {
            assert!(
                Instant::now() < deadline,
                "a file written through mount A did not show on mount B within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        fs::remove_file(self.mount_a.join(probe)).unwrap();
    }
}

/// Whether `pid` is a live process whose command line names `dir` (so it is one this harness
/// started, not a process that took over a recycled pid).
fn ours(pid: i32, dir: &Path) -> bool {
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let dir = dir.as_os_str().as_encoded_bytes();
    cmdline.windows(dir.len()).any(|w| w == dir)
}

/// Sends `sig` to `pid` (if it is still ours) and waits up to `timeout` for it to be gone.
fn kill_and_wait(pid: i32, dir: &Path, sig: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    if ours(pid, dir) {
        // SAFETY: plain kill(2) on a process this harness started (checked just above).
        unsafe { libc::kill(pid, sig) };
    }
    while ours(pid, dir) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

impl Drop for Gluster {
    fn drop(&mut self) {
        let t0 = Instant::now();
        for m in self.mounted.drain(..).rev() {
            let ok = Command::new("umount")
                .arg(&m)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!("gluster: umount {} failed; lazy unmount", m.display());
                let _ = Command::new("umount").arg("-l").arg(&m).status();
            }
        }
        if self.started
            && !self
                .cli(&["volume", "stop", VOLUME, "force"])
                .is_some_and(|o| o.status.success())
        {
            eprintln!("gluster: volume stop {VOLUME} failed");
        }
        if self.created
            && !self
                .cli(&["volume", "delete", VOLUME])
                .is_some_and(|o| o.status.success())
        {
            eprintln!("gluster: volume delete {VOLUME} failed");
        }
        if let Some(mut glusterd) = self.glusterd.take() {
            // SAFETY: kill(2) on our own child.
            unsafe { libc::kill(glusterd.id() as i32, libc::SIGTERM) };
            if wait_timeout(&mut glusterd, Duration::from_secs(10))
                .ok()
                .flatten()
                .is_none()
            {
                eprintln!("gluster: glusterd ignored SIGTERM for 10 s; SIGKILL");
                let _ = glusterd.kill();
                let _ = glusterd.wait();
            }
        }
        // Whatever the stop left running (a mount client, a brick): it is ours, end it.
        for &pid in &self.spawned_pids {
            let dir = self.dir.path();
            if !kill_and_wait(pid, dir, libc::SIGTERM, Duration::from_secs(5)) {
                eprintln!("gluster: pid {pid} ignored SIGTERM; SIGKILL");
                kill_and_wait(pid, dir, libc::SIGKILL, Duration::from_secs(5));
            }
        }
        for f in &self.outside_files {
            let _ = fs::remove_file(f);
        }
        eprintln!("gluster: torn down in {:.2?}", t0.elapsed());
    }
}

/// Makes the host's kernel forget what it caches (dentries, inodes, pages), as memory pressure
/// does on its own.
pub fn drop_host_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
}
