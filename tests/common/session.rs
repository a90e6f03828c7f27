//! A vhostfs daemon on a fresh shared directory with a connected, initialised test guest: the
//! set-up of the per-operation integration tests (`tests/fs_ops*.rs`).

use std::fs;
use std::path::Path;
use std::sync::Arc;

use super::daemon::{spawn_vhostfs, Daemon};
use super::frontend::TestGuest;
use super::fuse_abi::InitOut;
use super::fuse_client::FuseClient;
use super::temp_dir::TempDir;

const MIB: usize = 1 << 20;

pub struct Session {
    pub client: FuseClient,
    /// What the daemon answered to the first INIT.
    pub init: InitOut,
    pub daemon: Daemon,
    pub shared: TempDir,
    /// Holds the socket `vfs.sock` (and its pid file `vfs.sock.pid`).
    pub sock_dir: TempDir,
}

impl Session {
    /// vhostfs with `extra` arguments on a fresh share, one request queue.
    pub fn start(extra: &[&str]) -> Session {
        Session::start_with_queues(extra, 1)
    }

    /// vhostfs with `extra` arguments on a fresh share, `queues` request queues of 256
    /// descriptors and 64 MiB of guest memory; INIT done on queue 0.
    pub fn start_with_queues(extra: &[&str], queues: usize) -> Session {
        Session::start_on(TempDir::new("fs-ops-shared").unwrap(), extra, queues)
    }

    /// vhostfs with `extra` arguments on a fresh share under `base`, one request queue.
    pub fn start_in(base: &Path, extra: &[&str]) -> Session {
        Session::start_on(TempDir::new_in(base, "fs-ops-shared").unwrap(), extra, 1)
    }

    /// vhostfs with `extra` arguments on `shared` as it is (e.g. with mounts below it), one
    /// request queue.
    pub fn start_on_share(shared: TempDir, extra: &[&str]) -> Session {
        Session::start_on(shared, extra, 1)
    }

    fn start_on(shared: TempDir, extra: &[&str], queues: usize) -> Session {
        let sock_dir = TempDir::new("fs-ops-sock").unwrap();
        let socket = sock_dir.join("vfs.sock");
        let args: Vec<&str> = [&["--log-level=error"], extra].concat();
        let daemon = spawn_vhostfs(&socket, shared.path(), &args)
            .unwrap_or_else(|e| panic!("cannot start vhostfs: {e}"));
        let guest = TestGuest::connect(&socket, queues, 256, 64 * MIB).expect("vhost-user set-up");
        let client = FuseClient::new(Arc::new(guest), 0);
        let init = client.init().expect("FUSE_INIT");
        Session {
            client,
            init,
            daemon,
            shared,
            sock_dir,
        }
    }

    /// The open flags of the serving process's fds on host inode `ino`, O_PATH fds (the inode
    /// table's) left out.
    pub fn host_fd_flags(&self, ino: u64) -> Vec<i32> {
        let pid = self.daemon.served_pid().unwrap();
        let mut found = Vec::new();
        for entry in fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
            // An fd closed since the listing is no longer of interest.
            let Ok(info) = fs::read_to_string(entry.unwrap().path()) else {
                continue;
            };
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|v| v.trim().to_string())
            };
            let flags = i32::from_str_radix(&field("flags:").unwrap(), 8).unwrap();
            let fd_ino: u64 = field("ino:").unwrap().parse().unwrap();
            if fd_ino == ino && flags & libc::O_PATH == 0 {
                found.push(flags);
            }
        }
        found
    }
}
