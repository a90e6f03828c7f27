use super::*;
use crate::passthrough::state::fd_budget::FdBudget;

fn fd_inode(ino: u64, budget: &Arc<FdBudget>) -> Inode {
    let fd = std::fs::File::open("/").unwrap().into();
    let key = InodeKey {
        ino,
        dev: 1,
        mnt_id: 1,
    };
    Inode::new(
        key,
        libc::S_IFREG,
        InodeSource::fd(fd, budget.take().unwrap()),
    )
}

#[test]
fn same_key_same_node_and_forget_frees() {
    let budget = FdBudget::new(100);
    let t = InodeTable::new(fd_inode(1, &budget));
    let a = t.insert(fd_inode(10, &budget)).unwrap();
    let b = t.insert(fd_inode(10, &budget)).unwrap();
    assert_eq!(a.nodeid, b.nodeid);
    assert_ne!(a.nodeid, ROOT_ID);
    assert_eq!(t.lookups(a.nodeid), 2);
    // the duplicate's fd went back to the budget
    assert_eq!(budget.in_use(), 2);
    let c = t.ref_existing(&a.key).unwrap();
    assert_eq!(c.nodeid, a.nodeid);
    assert_eq!(t.lookups(a.nodeid), 3);
    drop((b, c));
    t.forget(a.nodeid, 2);
    assert!(t.get(a.nodeid).is_ok());
    t.forget(a.nodeid, 5);
    assert_eq!(
        t.get(a.nodeid).unwrap_err().raw_os_error(),
        Some(libc::EBADF)
    );
    assert!(t.ref_existing(&a.key).is_none());
    drop(a);
    assert_eq!(budget.in_use(), 1);
    let d = t.insert(fd_inode(10, &budget)).unwrap();
    assert_eq!(t.lookups(d.nodeid), 1);
}

#[test]
fn an_inode_is_48_bytes_and_its_source_16() {
    assert_eq!(std::mem::size_of::<InodeKey>(), 16);
    assert_eq!(std::mem::size_of::<InodeSource>(), 16);
    assert_eq!(std::mem::size_of::<Option<InodeSource>>(), 16);
    assert_eq!(std::mem::size_of::<Inode>(), 48);
}

#[test]
fn a_forgotten_node_id_stays_dead_when_its_slot_is_reused() {
    let budget = FdBudget::new(100);
    let t = InodeTable::new(fd_inode(1, &budget));
    let a = t.insert(fd_inode(10, &budget)).unwrap();
    assert!(t.forget(a.nodeid, 1));
    let mut ids = vec![a.nodeid];
    // new inodes take the vacated slot of their shard; none gets a node ID seen before
    for ino in 11..60 {
        let b = t.insert(fd_inode(ino, &budget)).unwrap();
        assert!(!ids.contains(&b.nodeid), "{} handed out twice", b.nodeid);
        ids.push(b.nodeid);
        assert!(t.forget(b.nodeid, 1));
    }
    for id in ids {
        assert_eq!(t.get(id).unwrap_err().raw_os_error(), Some(libc::EBADF));
        assert!(!t.forget(id, 1));
    }
    assert_eq!(t.len(), 1);
    for bad in [0, 2, 15, u64::MAX] {
        assert!(t.get(bad).is_err());
        assert_eq!(t.lookups(bad), 0);
    }
}

#[test]
fn guest_state_lives_and_dies_with_its_node() {
    let budget = FdBudget::new(100);
    let t = InodeTable::new(fd_inode(1, &budget));
    let a = t.insert(fd_inode(10, &budget)).unwrap();
    assert_eq!(t.generation(a.nodeid), 0);
    let g = t.guest(a.nodeid).unwrap();
    g.raise_generation();
    assert_eq!(t.generation(a.nodeid), 1);
    assert!(Arc::ptr_eq(&g, &t.guest(a.nodeid).unwrap()));
    assert!(t.forget(a.nodeid, 1));
    assert_eq!(t.generation(a.nodeid), 0);
    assert!(t.guest(a.nodeid).is_none());
    let b = t.insert(fd_inode(11, &budget)).unwrap();
    t.guest(b.nodeid).unwrap().raise_generation();
    t.clear();
    assert_eq!(t.generation(b.nodeid), 0);
}

#[test]
fn root_survives_forget_and_clear() {
    let budget = FdBudget::new(200);
    let t = InodeTable::new(fd_inode(1, &budget));
    for i in 0..100 {
        t.insert(fd_inode(100 + i, &budget)).unwrap();
    }
    assert_eq!(t.len(), 101);
    t.forget(ROOT_ID, 10);
    t.clear();
    assert_eq!(t.len(), 1);
    assert!(t.get(ROOT_ID).is_ok());
    assert_eq!(budget.in_use(), 1);
    assert_eq!(
        t.ref_existing(&t.get(ROOT_ID).unwrap().key.clone())
            .unwrap()
            .nodeid,
        ROOT_ID
    );
}

#[test]
fn node_ids_of_a_cleared_session_are_not_handed_out_again() {
    let budget = FdBudget::new(200);
    let t = InodeTable::new(fd_inode(1, &budget));
    let old: Vec<u64> = (0..50)
        .map(|i| t.insert(fd_inode(100 + i, &budget)).unwrap().nodeid)
        .collect();
    t.clear();
    for i in 0..50 {
        let n = t.insert(fd_inode(100 + i, &budget)).unwrap().nodeid;
        assert!(!old.contains(&n), "{n} handed out again after a clear");
        assert!(t.get(old[i as usize]).is_err());
    }
}

#[test]
fn restored_nodes_keep_their_ids_and_counts() {
    let budget = FdBudget::new(400);
    let t = InodeTable::new(fd_inode(1, &budget));
    // Node IDs of several shards, most of them not their key's: found by key through aliases.
    let restored = [0x53, 0x54, 0x1000_0005, 0x3_0000_0025];
    for (nodeid, ino) in restored.into_iter().zip(20..) {
        t.restore(fd_inode(ino, &budget), nodeid, 3).unwrap();
        assert_eq!(t.lookups(nodeid), 3);
        assert_eq!(t.id_of(&t.get(nodeid).unwrap().key), Some(nodeid));
    }
    assert_eq!(t.len(), 5);
    assert_eq!(
        t.restore(fd_inode(30, &budget), 0x53, 1)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EEXIST)
    );
    assert!(t.restore(fd_inode(31, &budget), ROOT_ID, 1).is_err());
    assert!(t.restore(fd_inode(32, &budget), 0, 1).is_err());
    // a lookup by key takes a lookup of the restored node, as does an insert of the same key
    let again = t.ref_existing(&t.get(0x53).unwrap().key).unwrap();
    assert_eq!((again.nodeid, t.lookups(0x53)), (0x53, 4));
    let same = t.insert(fd_inode(20, &budget)).unwrap();
    assert_eq!((same.nodeid, t.lookups(0x53)), (0x53, 5));
    assert!(!t.forget(0x53, 4));
    assert!(t.forget(0x53, 1));
    assert!(t.ref_existing(&fd_inode(20, &budget).key).is_none());
    assert_eq!(t.id_of(&fd_inode(20, &budget).key), None);
    // New node IDs never collide with restored ones.
    for i in 0..200 {
        let n = t.insert(fd_inode(100 + i, &budget)).unwrap();
        assert!(!restored.contains(&n.nodeid));
    }
    let invalid = Inode::new(
        fd_inode(25, &budget).key,
        libc::S_IFREG,
        InodeSource::Invalid,
    );
    t.restore(invalid, 0x7777_0007, 1).unwrap();
    assert!(t.ref_existing(&fd_inode(25, &budget).key).is_none());
    let held = t.held();
    assert_eq!(held.len(), 3 + 200 + 1);
    assert!(held
        .iter()
        .any(|(i, n)| i.nodeid == 0x3_0000_0025 && *n == 3));
    assert!(held.iter().any(|(i, n)| i.nodeid == 0x7777_0007 && *n == 1));
    t.clear();
    assert_eq!(t.len(), 1);
    assert!(t.get(0x54).is_err());
}

/// A handle that opens an inode other than the one the table recorded (another number, or
/// another type) is ESTALE: never another file's data (issue 35).
#[test]
fn a_handle_opening_another_inode_is_stale() {
    use crate::passthrough::state::file_handle::{FileHandle, MountFds};
    use crate::passthrough::sys;
    use std::os::fd::AsFd;
    let dir = crate::temp_dir::TempDir::new("vhostfs-stale").unwrap();
    std::fs::write(dir.join("a"), b"a").unwrap();
    std::fs::write(dir.join("b"), b"b").unwrap();
    let d = std::fs::File::open(dir.path()).unwrap();
    let (h, mnt_id) = FileHandle::from_fd(d.as_fd(), c"a")
        .unwrap()
        .expect("tmp supports handles");
    let mounts = MountFds::default();
    let proc_self_fd = std::fs::File::open("/proc/self/fd").unwrap();
    mounts
        .ensure(mnt_id, d.as_fd(), libc::S_IFDIR, proc_self_fd.as_fd())
        .unwrap();
    let key = |name: &std::ffi::CStr| {
        InodeKey::of(&sys::statx(d.as_fd(), name, 0, sys::STATX_WANTED).unwrap())
    };
    let inode = |k, kind| Inode::new(k, kind, InodeSource::Handle(h.clone()));
    let fd = inode(key(c"a"), libc::S_IFREG)
        .open_handle(&mounts, libc::O_RDONLY)
        .expect("the recorded inode");
    assert_eq!(
        std::fs::read(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        ))
        .unwrap(),
        b"a"
    );
    for (k, kind) in [(key(c"b"), libc::S_IFREG), (key(c"a"), libc::S_IFDIR)] {
        let r = inode(k, kind).open_handle(&mounts, libc::O_RDONLY);
        assert_eq!(r.err().and_then(|e| e.raw_os_error()), Some(libc::ESTALE));
    }
}
