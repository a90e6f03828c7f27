//! OPENDIR, READDIR, READDIRPLUS and RELEASEDIR of a large directory, and the lookup count
//! READDIRPLUS gives each entry.

use super::*;

#[test]
fn readdir_and_readdirplus_of_1000_entries() {
    let s = Session::start(&[]);
    let c = &s.client;
    let dir = s.shared.join("big");
    fs::create_dir(&dir).unwrap();
    let mut expect: BTreeSet<Vec<u8>> = [b".".to_vec(), b"..".to_vec()].into();
    for i in 0..1000 {
        let name = format!("entry-{i:04}");
        fs::write(dir.join(&name), b"").unwrap();
        expect.insert(name.into_bytes());
    }
    let d = c.lookup(ROOT, "big").unwrap();
    let dh = c.opendir(d.nodeid, 0).expect("OPENDIR");

    // Small replies: many READDIRs, each resuming at the offset of the last entry.
    let mut all = Vec::new();
    let mut offset = 0;
    loop {
        let batch = c.readdir(d.nodeid, dh.fh, offset, 1024).expect("READDIR");
        if batch.is_empty() {
            break;
        }
        offset = batch.last().unwrap().off;
        all.extend(batch);
    }
    let names: Vec<Vec<u8>> = all.iter().map(|e| e.name.clone()).collect();
    assert_eq!(names.len(), 1002, "duplicates or missing entries");
    assert_eq!(names.iter().cloned().collect::<BTreeSet<_>>(), expect);
    for e in &all {
        let name = std::str::from_utf8(&e.name).unwrap();
        if name.starts_with("entry-") {
            assert_eq!(e.ino, fs::metadata(dir.join(name)).unwrap().ino());
            assert_eq!(e.type_, u32::from(libc::DT_REG));
        } else {
            assert_eq!(e.type_, u32::from(libc::DT_DIR));
        }
    }
    // Resuming from any entry's offset continues right after it.
    for k in [0, 1, 499, 1000] {
        let rest = c.readdir(d.nodeid, dh.fh, all[k].off, 4096).unwrap();
        assert_eq!(rest[0].name, all[k + 1].name, "resume after entry {k}");
    }
    assert!(c
        .readdir(d.nodeid, dh.fh, all[1001].off, 4096)
        .unwrap()
        .is_empty());

    // READDIRPLUS: the node IDs are those LOOKUP gives.
    let mut plus = Vec::new();
    let mut offset = 0;
    loop {
        let batch = c
            .readdirplus(d.nodeid, dh.fh, offset, 16 * 1024)
            .expect("READDIRPLUS");
        if batch.is_empty() {
            break;
        }
        offset = batch.last().unwrap().dirent.off;
        plus.extend(batch);
    }
    assert_eq!(plus.len(), 1002);
    let mut seen = BTreeSet::new();
    for p in &plus {
        let name = String::from_utf8(p.dirent.name.clone()).unwrap();
        seen.insert(p.dirent.name.clone());
        if name == "." || name == ".." {
            // Never a node for these (".." of the share root is outside it).
            assert_eq!(p.entry.nodeid, 0, "{name}");
            continue;
        }
        let l = c.lookup(d.nodeid, &name).unwrap();
        assert_eq!(p.entry.nodeid, l.nodeid, "{name}");
        assert_eq!(p.entry.attr.ino, l.attr.ino, "{name}");
        assert_eq!(
            p.entry.attr.mode,
            fs::metadata(dir.join(&name)).unwrap().mode()
        );
    }
    assert_eq!(seen, expect);

    c.fsyncdir(d.nodeid, dh.fh, false).expect("FSYNCDIR");
    c.fsyncdir(d.nodeid, dh.fh, true)
        .expect("FSYNCDIR datasync");
    c.releasedir(d.nodeid, dh.fh).expect("RELEASEDIR");
    assert_eq!(c.readdir(d.nodeid, dh.fh, 0, 4096).err(), Some(libc::EBADF));
    assert_eq!(c.fsyncdir(d.nodeid, dh.fh, false).err(), Some(libc::EBADF));
    assert_eq!(c.releasedir(d.nodeid, dh.fh).err(), Some(libc::EBADF));

    // A file is not a directory.
    let f = c.lookup(d.nodeid, "entry-0000").unwrap();
    assert_eq!(c.opendir(f.nodeid, 0).err(), Some(libc::ENOTDIR));
    let fo = c.open(f.nodeid, RDONLY).unwrap();
    assert_eq!(
        c.fsyncdir(f.nodeid, fo.fh, false).err(),
        Some(libc::ENOTDIR)
    );
    assert_eq!(
        c.readdir(f.nodeid, fo.fh, 0, 4096).err(),
        Some(libc::ENOTDIR)
    );
}

#[test]
fn readdirplus_entries_take_exactly_one_lookup() {
    let s = Session::start(&[]);
    let c = &s.client;
    for name in ["a", "b", "c", "d"] {
        fs::write(s.shared.join(name), b"").unwrap();
    }
    let dh = c.opendir(ROOT, 0).unwrap();
    // Room for about two entries: the entry that did not fit must not keep a lookup.
    let first = c.readdirplus(ROOT, dh.fh, 0, 400).unwrap();
    let named: Vec<_> = first
        .iter()
        .filter(|p| p.dirent.name != b"." && p.dirent.name != b"..")
        .collect();
    let mut offset = first.last().unwrap().dirent.off;
    let mut rest = Vec::new();
    loop {
        let batch = c.readdirplus(ROOT, dh.fh, offset, 400).unwrap();
        let Some(last) = batch.last() else { break };
        offset = last.dirent.off;
        rest.extend(batch);
    }
    let mut nodes: Vec<u64> = named.iter().map(|p| p.entry.nodeid).collect();
    nodes.extend(
        rest.iter()
            .filter(|p| p.dirent.name != b"." && p.dirent.name != b"..")
            .map(|p| p.entry.nodeid),
    );
    assert_eq!(nodes.len(), 4);
    // One FORGET each and they are gone: every entry was handed out with one lookup.
    for &n in &nodes {
        c.getattr(n, None).expect("node from READDIRPLUS");
        c.forget(n, 1);
        assert_eq!(c.getattr(n, None).err(), Some(libc::EBADF));
    }
    c.releasedir(ROOT, dh.fh).unwrap();
}
