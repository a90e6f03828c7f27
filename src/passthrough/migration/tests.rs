//! The in-place upgrade's form of the state: every open file handed over as an fd, an inode
//! by its file handle (with its mount's fd) where it has one, else by an fd.

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

use super::*;
use crate::passthrough::config::{FsConfig, InodeFileHandles};
use crate::passthrough::filesystem::PassthroughFs;
use crate::passthrough::request_types::Context;
use crate::passthrough::state::host_inode::InodeSource;
use crate::temp_dir::TempDir;

fn fs_on(dir: &TempDir, handles: InodeFileHandles) -> PassthroughFs {
    PassthroughFs::new(FsConfig::for_tests(dir.path(), handles)).unwrap()
}

#[test]
fn fds_handed_over_keep_node_ids_counts_and_open_files_even_unlinked() {
    let ctx = Context {
        uid: 0,
        gid: 0,
        pid: 1,
    };
    for handles in [InodeFileHandles::Never, InodeFileHandles::Prefer] {
        let dir = TempDir::new("vhostfs-mig-fds").unwrap();
        std::fs::create_dir(dir.join("d")).unwrap();
        std::fs::write(dir.join("d/f"), b"hello").unwrap();
        let old = fs_on(&dir, handles);
        let d = old.lookup(&ctx, 1, c"d").unwrap();
        let f = old.lookup(&ctx, d.nodeid, c"f").unwrap();
        old.lookup(&ctx, d.nodeid, c"f").unwrap();
        let fh = old
            .open(&ctx, f.nodeid, libc::O_RDWR as u32, false)
            .unwrap()
            .fh;
        // Gone from every path: only an fd can hand it over.
        std::fs::remove_file(dir.join("d/f")).unwrap();

        let (mut enc, mut fds) = (Encoder::default(), Vec::new());
        let saved = old.save_state(&mut enc, Some(&mut fds)).unwrap();
        assert_eq!((saved.inodes, saved.handles, saved.invalid), (2, 1, 0));
        // Never: both inodes' fds and the open file's; prefer: the mount's and the open file's.
        let by_handle = handles == InodeFileHandles::Prefer;
        assert_eq!(fds.len(), if by_handle { 2 } else { 3 });
        let mut bytes = Vec::new();
        enc.finish(&mut bytes).unwrap();
        // What the new process receives: its own fds.
        let fds: Vec<_> = fds
            .iter()
            .map(|f| f.as_fd().try_clone_to_owned().unwrap())
            .collect();
        drop(old);

        let new = fs_on(&dir, handles);
        let body = read_envelope(&mut &bytes[..]).unwrap();
        let loaded = new.prepare_load(&mut Decoder::new(&body), fds).unwrap();
        new.install(loaded);
        assert_eq!(new.lookup_count(f.nodeid), 2);
        assert_eq!(new.lookup_count(d.nodeid), 1);
        let mut data = String::new();
        new.with_file(fh, |file| {
            file.write_at(b"HE", 0)?;
            let mut copy = file.try_clone()?;
            std::io::Seek::rewind(&mut copy)?;
            copy.read_to_string(&mut data)
        })
        .unwrap();
        assert_eq!(data, "HEllo");
        assert_eq!(new.getattr(&ctx, f.nodeid, None).unwrap().st.stx_nlink, 0);
        for node in [d.nodeid, f.nodeid] {
            let source = new.inodes.get(node).unwrap().source;
            assert_eq!(
                matches!(source, InodeSource::Handle(_)),
                by_handle,
                "node {node}"
            );
        }
        // The handles open against the mount fd handed over, in a file handed over unlinked.
        let reopened = new
            .open(&ctx, f.nodeid, libc::O_RDONLY as u32, false)
            .unwrap();
        new.with_file(reopened.fh, |file| {
            let mut s = String::new();
            file.try_clone()?.read_to_string(&mut s)?;
            assert_eq!(s, "HEllo");
            Ok(())
        })
        .unwrap();
        // A stream naming an fd that was not handed over is refused.
        let again = new.prepare_load(&mut Decoder::new(&body), Vec::new());
        assert!(again.is_err());
    }
}

#[test]
fn every_prefix_of_an_upgrade_section_is_refused() {
    let ctx = Context {
        uid: 0,
        gid: 0,
        pid: 1,
    };
    for handles in [InodeFileHandles::Never, InodeFileHandles::Prefer] {
        let dir = TempDir::new("vhostfs-mig-prefix").unwrap();
        std::fs::write(dir.join("f"), b"x").unwrap();
        let old = fs_on(&dir, handles);
        let f = old.lookup(&ctx, 1, c"f").unwrap();
        old.open(&ctx, f.nodeid, libc::O_RDONLY as u32, false)
            .unwrap();
        let (mut enc, mut fds) = (Encoder::default(), Vec::new());
        old.save_state(&mut enc, Some(&mut fds)).unwrap();
        let mut bytes = Vec::new();
        enc.finish(&mut bytes).unwrap();
        let body = read_envelope(&mut &bytes[..]).unwrap();
        assert!(load::decode(&mut Decoder::new(&body)).is_ok());
        // Without its mount fds at the end, a keyed inode names a mount that is not there.
        for n in 0..body.len() {
            let section = load::decode(&mut Decoder::new(&body[..n]));
            assert!(section.is_err(), "{handles:?}: the first {n} bytes decode");
        }
    }
}
