//! Live migration with the test guest as QEMU: the state saved from one vhostfs over
//! DEVICE_STATE, loaded into a second vhostfs on the same share, and the session continued
//! there with the node IDs and fhs from before (issue 12), in both `--migration-mode`s; refused
//! streams; the error cases of docs/migration.md under both `--migration-on-error` policies.

mod common;
#[path = "migration/errors.rs"]
mod errors;
#[path = "migration/inflight.rs"]
mod inflight;
#[path = "migration/numbers.rs"]
mod numbers;

use std::fs;
use std::path::Path;
use std::sync::Arc;

use common::fuse_abi::EntryOut;
use common::{spawn_vhostfs, Daemon, FuseClient, SavedState, TempDir, TestGuest};

const MIB: usize = 1 << 20;
const RDWR: u32 = libc::O_RDWR as u32;
/// Files in the directory the guest holds open.
const FILES: usize = 300;

/// A source daemon with a guest on it, and a destination daemon waiting, on one share.
struct Pair {
    /// `None` only while the guest moves.
    client: Option<FuseClient>,
    source: Daemon,
    dest: Daemon,
    dest_socket: std::path::PathBuf,
    shared: TempDir,
    _sock_dir: TempDir,
}

fn start(source_args: &[&str], dest_args: &[&str]) -> Pair {
    let shared = TempDir::new("mig-shared").unwrap();
    start_on(shared, source_args, None, dest_args)
}

/// Both daemons on `shared`, or the destination on `dest_share` when given.
fn start_on(
    shared: TempDir,
    source_args: &[&str],
    dest_share: Option<&Path>,
    dest_args: &[&str],
) -> Pair {
    let sock_dir = TempDir::new("mig-sock").unwrap();
    let (src_sock, dst_sock) = (sock_dir.join("src.sock"), sock_dir.join("dst.sock"));
    let source_args = [&["--log-level=error"], source_args].concat();
    let dest_args = [&["--log-level=error"], dest_args].concat();
    let source = spawn_vhostfs(&src_sock, shared.path(), &source_args).unwrap();
    let dest = spawn_vhostfs(&dst_sock, dest_share.unwrap_or(shared.path()), &dest_args).unwrap();
    let guest = TestGuest::connect(&src_sock, 1, 256, 16 * MIB).unwrap();
    let client = FuseClient::new(Arc::new(guest), 0);
    client.init().unwrap();
    Pair {
        client: Some(client),
        source,
        dest,
        dest_socket: dst_sock,
        shared,
        _sock_dir: sock_dir,
    }
}

impl Pair {
    fn c(&self) -> &FuseClient {
        self.client.as_ref().expect("a guest")
    }

    /// Saves on the source and moves the guest to the destination.
    fn migrate(&mut self) {
        let saved = self.c().guest().save_state().expect("save");
        self.migrate_with(&saved).expect("load");
    }

    /// Moves the guest to the destination with `saved`; on a refused load the guest is gone.
    fn migrate_with(&mut self, saved: &SavedState) -> std::io::Result<()> {
        let old = self.client.take().expect("a guest");
        let (queue, flags) = (old.queue(), old.flags());
        let guest = Arc::clone(old.guest());
        drop(old);
        let moved = TestGuest::migrate(guest, &self.dest_socket, saved)?;
        self.client = Some(FuseClient::resumed(Arc::new(moved), queue, flags));
        Ok(())
    }
}

/// Whether the destination refuses `saved` (a load attempted on a second connection: the
/// source's guest stays where it is, to be resumed).
fn refused_load(p: &Pair, saved: &SavedState) -> bool {
    let opts = p.c().guest().options().clone();
    match TestGuest::connect_after_load(&p.dest_socket, &opts, &saved.bytes) {
        Ok((loaded, _guest)) => loaded.is_err(),
        Err(e) => panic!("cannot reach the destination: {e}"),
    }
}

/// What the guest holds before the switch-over, in `dir/` of the share.
struct Held {
    dir: EntryOut,
    file: EntryOut,
    fh: u64,
    dir_fh: u64,
    /// READDIR of `dir` from the start, before.
    listing: Vec<Vec<u8>>,
    /// The offset after the last entry.
    end: u64,
    root_fh: u64,
}

fn hold(c: &FuseClient, shared: &TempDir) -> Held {
    fs::create_dir(shared.join("dir")).unwrap();
    // Enough entries for an indexed (htree) ext4 directory: more than one block.
    for i in 0..FILES {
        fs::write(
            shared.join(&format!("dir/a-file-with-a-longer-name-{i:03}")),
            b"",
        )
        .unwrap();
    }
    fs::write(shared.join("dir/data"), b"0123456789").unwrap();
    let dir = c.lookup(1, "dir").unwrap();
    let file = c.lookup(dir.nodeid, "data").unwrap();
    // Two lookups of the file: FORGET of both must work after the move.
    c.lookup(dir.nodeid, "data").unwrap();
    let fh = c.open(file.nodeid, RDWR).unwrap().fh;
    assert_eq!(c.write(file.nodeid, fh, 10, b"abc").unwrap(), 3);
    let dir_fh = c.opendir(dir.nodeid, 0).unwrap().fh;
    // The root open too (`ls /`): its fh comes along.
    let root_fh = c.opendir(1, 0).unwrap().fh;
    let entries = c.readdir(dir.nodeid, dir_fh, 0, 64 * 1024).unwrap();
    let listing = names(&entries);
    assert_eq!(listing.len(), FILES + 3);
    let end = entries.last().unwrap().off;
    assert!(c
        .readdir(dir.nodeid, dir_fh, end, 64 * 1024)
        .unwrap()
        .is_empty());
    Held {
        dir,
        file,
        fh,
        dir_fh,
        listing,
        end,
        root_fh,
    }
}

fn names(entries: &[common::fuse_client::DirEntry]) -> Vec<Vec<u8>> {
    entries.iter().map(|e| e.name.clone()).collect()
}

/// Everything `held` had works on the destination, as on the source.
fn check_held(p: &Pair, held: &Held) {
    let c = p.c();
    assert_eq!(
        c.read(held.file.nodeid, held.fh, 0, 100).unwrap(),
        b"0123456789abc"
    );
    assert_eq!(c.write(held.file.nodeid, held.fh, 13, b"def").unwrap(), 3);
    assert_eq!(
        fs::read(p.shared.join("dir/data")).unwrap(),
        b"0123456789abcdef"
    );
    let attr = c.getattr(held.file.nodeid, None).unwrap().attr;
    assert_eq!((attr.ino, attr.size), (held.file.attr.ino, 16));
    assert_eq!(
        c.getattr(held.dir.nodeid, None).unwrap().attr.ino,
        held.dir.attr.ino
    );
    // LOOKUP finds the same node IDs.
    assert_eq!(c.lookup(1, "dir").unwrap().nodeid, held.dir.nodeid);
    assert_eq!(
        c.lookup(held.dir.nodeid, "data").unwrap().nodeid,
        held.file.nodeid
    );
    // READDIR on the directory handle from before: first at the end (where the guest's last
    // READDIR left it), then from the start and from the middle (ext4 has answered the start
    // with nothing after a first getdents at the end of a fresh fd).
    let end = c
        .readdir(held.dir.nodeid, held.dir_fh, held.end, 64 * 1024)
        .unwrap();
    assert!(end.is_empty(), "{} entries past the end", end.len());
    let all = c
        .readdir(held.dir.nodeid, held.dir_fh, 0, 64 * 1024)
        .unwrap();
    assert_eq!(names(&all), held.listing);
    let rest = c
        .readdir(held.dir.nodeid, held.dir_fh, all[9].off, 64 * 1024)
        .unwrap();
    assert_eq!(names(&rest), held.listing[10..]);
    // The lookup counts came along: 2 taken before + 1 now on the file, 1 + 1 on the dir.
    c.forget(held.file.nodeid, 2);
    assert!(c.getattr(held.file.nodeid, None).is_ok());
    c.forget(held.file.nodeid, 1);
    c.forget(held.dir.nodeid, 2);
    c.release(held.file.nodeid, held.fh, 0).unwrap();
    c.releasedir(held.dir.nodeid, held.dir_fh).unwrap();
    let top = names(&c.readdir(1, held.root_fh, 0, 4096).unwrap());
    assert!(top.contains(&b"dir".to_vec()), "{top:?}");
    c.releasedir(1, held.root_fh).unwrap();
    // Forgotten: the node IDs are gone (a round trip first, FORGET has no reply).
    assert!(c.getattr(1, None).is_ok());
    assert_eq!(c.getattr(held.file.nodeid, None).err(), Some(libc::EBADF));
    assert_eq!(c.getattr(held.dir.nodeid, None).err(), Some(libc::EBADF));
    // New node IDs and fhs do not collide with the old ones.
    let again = c.lookup(1, "dir").unwrap();
    assert_ne!(again.nodeid, held.file.nodeid);
    let fh = c.opendir(again.nodeid, 0).unwrap().fh;
    assert!(fh != held.fh && fh != held.dir_fh);
}

fn migrate_and_continue(args: &[&str]) {
    let mut p = start(args, args);
    let held = hold(p.c(), &p.shared);
    p.migrate();
    check_held(&p, &held);
    assert!(p.dest.is_alive());
    // The source lets go once its frontend does (QEMU quits after the switch-over).
    drop(p.client.take());
    let status = p
        .source
        .wait_exit(std::time::Duration::from_secs(10))
        .unwrap();
    assert!(status.is_some(), "the source daemon did not exit");
}

#[test]
fn find_paths_migration_keeps_node_ids_and_fhs() {
    migrate_and_continue(&["--migration-mode=find-paths"]);
}

// KubeVirt's command line (virt-controller services/virtiofs.go).
#[test]
fn kubevirt_options_migrate() {
    migrate_and_continue(&[
        "--sandbox=none",
        "--cache=auto",
        "--migration-on-error=guest-error",
        "--migration-mode=find-paths",
    ]);
}

#[test]
fn find_paths_with_o_path_inodes() {
    migrate_and_continue(&["--migration-mode=find-paths", "--inode-file-handles=never"]);
}

#[test]
fn file_handles_migration_keeps_node_ids_and_fhs() {
    migrate_and_continue(&[
        "--migration-mode=file-handles",
        "--inode-file-handles=mandatory",
    ]);
}

#[test]
fn file_handles_from_o_path_inodes() {
    migrate_and_continue(&[
        "--migration-mode=file-handles",
        "--inode-file-handles=never",
    ]);
}

// The tests run under the default `--sandbox=namespace` (share as `/`, /proc of the
// namespace, seccomp, Landlock); under `chroot` the share is `/` too, without a sandbox the
// paths are the host's.
#[test]
fn migration_under_chroot_and_without_a_sandbox() {
    for sandbox in ["--sandbox=chroot", "--sandbox=none"] {
        for mode in [
            "--migration-mode=find-paths",
            "--migration-mode=file-handles",
        ] {
            migrate_and_continue(&[mode, sandbox]);
        }
    }
}

/// A destination that refused `bytes` holds nothing of the source's session.
fn refused_by_fresh_destination(p: &Pair, bytes: &[u8], held: &Held, args: &[&str]) {
    let sock_dir = TempDir::new("mig-refused").unwrap();
    let socket = sock_dir.join("d.sock");
    let args = [&["--log-level=off"], args].concat();
    let _dest = spawn_vhostfs(&socket, p.shared.path(), &args).unwrap();
    let opts = p.c().guest().options().clone();
    let (loaded, guest) = TestGuest::connect_after_load(&socket, &opts, bytes).unwrap();
    assert!(
        loaded.is_err(),
        "a bad stream of {} bytes was loaded",
        bytes.len()
    );
    let c = FuseClient::new(Arc::new(guest), 0);
    c.init().unwrap();
    assert_eq!(c.getattr(held.file.nodeid, None).err(), Some(libc::EBADF));
    assert_eq!(
        c.read(held.file.nodeid, held.fh, 0, 10).err(),
        Some(libc::EBADF)
    );
    assert!(c.getattr(1, None).is_ok());
}

#[test]
fn corrupt_and_truncated_streams_are_refused_and_the_source_goes_on() {
    let args = ["--migration-mode=find-paths"];
    let p = start(&args, &args);
    let held = hold(p.c(), &p.shared);
    let saved = p.c().guest().save_state().unwrap();
    let n = saved.bytes.len();
    let mut flipped = saved.bytes.clone();
    flipped[n / 2] ^= 1;
    let mut bad_magic = saved.bytes.clone();
    bad_magic[0] = b'X';
    for bad in [
        &saved.bytes[..n / 2],
        &saved.bytes[..n - 1],
        &[][..],
        &flipped[..],
        &bad_magic[..],
    ] {
        refused_by_fresh_destination(&p, bad, &held, &args);
    }
    // The source resumes (QEMU restarts its rings) with everything the guest held.
    p.c().guest().resume(&saved).unwrap();
    check_held(&p, &held);
}

// The INIT answer comes along: under `--writeback` on both daemons, a session that negotiated
// FUSE_WRITEBACK_CACHE gets its O_WRONLY opens widened on the destination (the guest's page
// cache reads through them), and one that did not, does not (READ on it is EBADF).
#[test]
fn the_negotiated_init_flags_come_along() {
    use common::fuse_abi::{FUSE_WRITEBACK_CACHE, LINUX_6_12_VIRTIOFS_INIT_FLAGS};
    for writeback in [true, false] {
        let args = ["--writeback"];
        let mut p = start(&args, &args);
        if !writeback {
            let c = p.c().on_queue(0);
            c.init_with(LINUX_6_12_VIRTIOFS_INIT_FLAGS & !FUSE_WRITEBACK_CACHE)
                .unwrap();
            p.client = Some(c);
        }
        assert_eq!(p.c().flags() & FUSE_WRITEBACK_CACHE != 0, writeback);
        fs::write(p.shared.join("f"), b"abc").unwrap();
        let e = p.c().lookup(1, "f").unwrap();
        p.migrate();
        let fh = p.c().open(e.nodeid, libc::O_WRONLY as u32).unwrap().fh;
        let read = p.c().read(e.nodeid, fh, 0, 3);
        if writeback {
            assert_eq!(read.unwrap(), b"abc");
        } else {
            assert_eq!(read.err(), Some(libc::EBADF));
        }
    }
}

/// zlib's CRC-32, to re-seal a stream whose body a test changed.
fn crc32(data: &[u8]) -> u32 {
    !data.iter().fold(!0u32, |mut c, &b| {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        c
    })
}

// A stream with a valid envelope around a changed body (what a bug, not the wire, would make):
// refused or loaded, the destination never crashes and serves afterwards.
#[test]
fn changed_bodies_with_a_valid_checksum_never_crash_the_destination() {
    let args = [
        "--migration-mode=file-handles",
        "--migration-verify-handles",
    ];
    let p = start(&args, &args);
    let held = hold(p.c(), &p.shared);
    let saved = p.c().guest().save_state().unwrap();
    let body = 20..saved.bytes.len() - 4;
    let mut seed = 0x9e37_79b9_u32;
    let mut refused = 0;
    for _ in 0..24 {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
        let mut bytes = saved.bytes.clone();
        let at = body.start + (seed as usize >> 8) % body.len();
        bytes[at] = bytes[at].wrapping_add(1 + (seed & 0x7f) as u8);
        let crc = crc32(&bytes[body.clone()]).to_le_bytes();
        let n = bytes.len();
        bytes[n - 4..].copy_from_slice(&crc);
        let sock_dir = TempDir::new("mig-changed").unwrap();
        let socket = sock_dir.join("d.sock");
        let log = sock_dir.join("log");
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_vhostfs"));
        cmd.arg(format!("--socket-path={}", socket.display()))
            .arg(format!("--shared-dir={}", p.shared.path().display()))
            .arg("--log-level=error")
            .stderr(fs::File::create(&log).unwrap());
        let mut dest = Daemon::spawn(&mut cmd, &socket).unwrap();
        let opts = p.c().guest().options().clone();
        let (loaded, guest) = TestGuest::connect_after_load(&socket, &opts, &bytes).unwrap();
        let c = FuseClient::new(Arc::new(guest), 0);
        assert!(
            dest.is_alive(),
            "the destination died on a changed byte at {at}"
        );
        // Loaded or not, it serves: a fresh INIT, the root, and the node IDs it holds, if any.
        c.init().unwrap();
        assert!(c.getattr(1, None).is_ok());
        let _ = c.getattr(held.file.nodeid, None);
        assert!(dest.is_alive());
        let log = fs::read_to_string(&log).unwrap();
        assert!(!log.contains("panicked"), "byte {at}: {log}");
        if loaded.is_err() {
            assert!(log.contains("state transfer failed"), "byte {at}: {log}");
            refused += 1;
        }
    }
    assert!(refused > 0, "every changed stream was loaded");
}
