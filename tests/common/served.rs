//! A daemon (vhostfs, or virtiofsd for comparison) serving a share that already exists (a
//! directory on a GlusterFS mount, say), with an initialised test guest on one request queue.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use super::daemon::{spawn_virtiofsd, Daemon};
use super::frontend::TestGuest;
use super::fuse_client::FuseClient;
use super::temp_dir::TempDir;

const MIB: usize = 1 << 20;

/// The vhostfs binary to run: `VHOSTFS_BIN` (another build, e.g. an older one), else this
/// crate's.
pub fn vhostfs_bin() -> PathBuf {
    std::env::var_os("VHOSTFS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_vhostfs")))
}

/// A daemon serving a share, with an initialised test guest.
pub struct Served {
    pub client: FuseClient,
    pub daemon: Daemon,
    _sock_dir: TempDir,
}

impl Served {
    fn connect(daemon: Daemon, sock_dir: TempDir) -> Served {
        let guest = TestGuest::connect(&sock_dir.join("vfs.sock"), 1, 256, 64 * MIB)
            .expect("vhost-user set-up");
        let client = FuseClient::new(Arc::new(guest), 0);
        client.init().expect("FUSE_INIT");
        Served {
            client,
            daemon,
            _sock_dir: sock_dir,
        }
    }

    /// [`vhostfs_bin`] on `share` with `args` (and `--log-level=error`).
    pub fn vhostfs(share: &Path, args: &[&str]) -> Served {
        let sock_dir = TempDir::new("served-sock").unwrap();
        let socket = sock_dir.join("vfs.sock");
        let mut cmd = Command::new(vhostfs_bin());
        cmd.arg(format!("--socket-path={}", socket.display()))
            .arg(format!("--shared-dir={}", share.display()))
            .arg("--log-level=error")
            .args(args);
        let daemon = Daemon::spawn(&mut cmd, &socket)
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", vhostfs_bin().display()));
        Served::connect(daemon, sock_dir)
    }

    /// virtiofsd on `share` with `args`.
    pub fn virtiofsd(share: &Path, args: &[&str]) -> Served {
        let sock_dir = TempDir::new("served-sock").unwrap();
        let daemon = spawn_virtiofsd(&sock_dir.join("vfs.sock"), share, args)
            .unwrap_or_else(|e| panic!("cannot start virtiofsd: {e}"));
        Served::connect(daemon, sock_dir)
    }
}

/// The first 4 KiB of the file `node` (OPEN read-only, READ, RELEASE), or the errno.
pub fn read_node(c: &FuseClient, node: u64) -> Result<Vec<u8>, i32> {
    let o = c.open(node, libc::O_RDONLY as u32)?;
    let data = c.read(node, o.fh, 0, 4096);
    let _ = c.release(node, o.fh, 0);
    data
}
