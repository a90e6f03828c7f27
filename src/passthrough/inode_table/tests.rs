//! The inode table's unit tests.

use super::*;
use crate::passthrough::fd_budget::FdBudget;

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
    let a = t.insert(fd_inode(10, &budget));
    let b = t.insert(fd_inode(10, &budget));
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
    let d = t.insert(fd_inode(10, &budget));
    assert_eq!(t.lookups(d.nodeid), 1);
}

#[test]
fn an_inode_is_72_bytes_with_its_arc_counts() {
    assert_eq!(std::mem::size_of::<InodeKey>(), 16);
    assert_eq!(std::mem::size_of::<InodeSource>(), 16);
    assert_eq!(std::mem::size_of::<Inode>(), 56);
    assert_eq!(std::mem::size_of::<ById>(), 8);
    assert_eq!(std::mem::size_of::<ByKey>(), 8);
}

#[test]
fn guest_state_lives_and_dies_with_its_node() {
    let budget = FdBudget::new(100);
    let t = InodeTable::new(fd_inode(1, &budget));
    let a = t.insert(fd_inode(10, &budget));
    assert_eq!(t.generation(a.nodeid), 0);
    let g = t.guest(a.nodeid).unwrap();
    g.raise_generation();
    assert_eq!(t.generation(a.nodeid), 1);
    assert!(Arc::ptr_eq(&g, &t.guest(a.nodeid).unwrap()));
    assert!(t.forget(a.nodeid, 1));
    assert_eq!(t.generation(a.nodeid), 0);
    assert!(t.guest(a.nodeid).is_none());
    let b = t.insert(fd_inode(11, &budget));
    t.guest(b.nodeid).unwrap().raise_generation();
    t.clear();
    assert_eq!(t.generation(b.nodeid), 0);
}

#[test]
fn restored_nodes_keep_their_ids_and_counts() {
    let budget = FdBudget::new(400);
    let t = InodeTable::new(fd_inode(1, &budget));
    // Node IDs whose shard is not their key's: the two-lock forget.
    for (nodeid, ino) in [(0x53, 20), (0x54, 21), (0x1000_0005, 22)] {
        t.restore(fd_inode(ino, &budget), nodeid, 3).unwrap();
        assert_eq!(t.lookups(nodeid), 3);
        assert_eq!(t.id_of(&t.get(nodeid).unwrap().key), Some(nodeid));
    }
    assert_eq!(
        t.restore(fd_inode(23, &budget), 0x53, 1)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EEXIST)
    );
    assert!(t.restore(fd_inode(24, &budget), ROOT_ID, 1).is_err());
    let again = t.ref_existing(&t.get(0x53).unwrap().key).unwrap();
    assert_eq!((again.nodeid, t.lookups(0x53)), (0x53, 4));
    drop(again);
    assert!(!t.forget(0x53, 3));
    assert!(t.forget(0x53, 1));
    assert!(t.ref_existing(&fd_inode(20, &budget).key).is_none());
    // New node IDs never collide with restored ones.
    for i in 0..200 {
        let n = t.insert(fd_inode(100 + i, &budget));
        assert!(![0x54, 0x1000_0005].contains(&n.nodeid));
    }
    let invalid = Inode::new(
        fd_inode(25, &budget).key,
        libc::S_IFREG,
        InodeSource::Invalid,
    );
    t.restore(invalid, 0x7777_0007, 1).unwrap();
    assert!(t.ref_existing(&fd_inode(25, &budget).key).is_none());
    assert_eq!(
        t.held()
            .iter()
            .map(|(i, n)| (i.nodeid, *n))
            .filter(|(id, _)| *id == 0x7777_0007)
            .count(),
        1
    );
}

#[test]
fn root_survives_forget_and_clear() {
    let budget = FdBudget::new(200);
    let t = InodeTable::new(fd_inode(1, &budget));
    for i in 0..100 {
        t.insert(fd_inode(100 + i, &budget));
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
