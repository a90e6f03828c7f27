//! What the options change: `--readonly`, `--cache`; and four request queues at once.

use super::*;

#[test]
fn readonly_refuses_every_change() {
    let s = Session::start(&["--readonly", "--xattr"]);
    let c = &s.client;
    fs::write(s.shared.join("f"), b"content").unwrap();
    fs::create_dir(s.shared.join("d")).unwrap();
    let before: BTreeSet<_> = fs::read_dir(s.shared.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let f = c.lookup(ROOT, "f").unwrap();
    let d = c.lookup(ROOT, "d").unwrap();

    let o = c.open(f.nodeid, RDONLY).expect("read-only OPEN");
    assert_eq!(c.read(f.nodeid, o.fh, 0, 100).unwrap(), b"content");
    let dh = c.opendir(d.nodeid, 0).expect("OPENDIR");
    assert_eq!(c.readdir(d.nodeid, dh.fh, 0, 4096).unwrap().len(), 2);
    c.getattr(f.nodeid, None).unwrap();
    c.statfs(ROOT).unwrap();
    c.access(f.nodeid, libc::R_OK as u32).unwrap();

    let erofs = Some(libc::EROFS);
    assert_eq!(c.open(f.nodeid, RDWR).err(), erofs);
    assert_eq!(c.open(f.nodeid, libc::O_WRONLY as u32).err(), erofs);
    assert_eq!(c.open(f.nodeid, RDONLY | libc::O_TRUNC as u32).err(), erofs);
    assert_eq!(c.create(ROOT, "new", 0o644, RDWR, 0).err(), erofs);
    assert_eq!(c.tmpfile(ROOT, 0o644, RDWR, 0).err(), erofs);
    assert_eq!(c.mkdir(ROOT, "new", 0o755, 0).err(), erofs);
    assert_eq!(
        c.mknod(ROOT, "new", libc::S_IFIFO | 0o644, 0, 0).err(),
        erofs
    );
    assert_eq!(c.symlink(ROOT, "new", "f").err(), erofs);
    assert_eq!(c.link(f.nodeid, ROOT, "new").err(), erofs);
    assert_eq!(c.unlink(ROOT, "f").err(), erofs);
    assert_eq!(c.rmdir(ROOT, "d").err(), erofs);
    assert_eq!(c.rename(ROOT, "f", ROOT, "g").err(), erofs);
    assert_eq!(
        c.rename2(ROOT, "f", ROOT, "d", libc::RENAME_EXCHANGE).err(),
        erofs
    );
    let chmod = set_mode(libc::S_IFREG | 0o777);
    assert_eq!(c.setattr(f.nodeid, &chmod).err(), erofs);
    assert_eq!(c.write(f.nodeid, o.fh, 0, b"x").err(), Some(libc::EBADF));
    assert_eq!(c.fallocate(f.nodeid, o.fh, 0, 4096, 0).err(), erofs);
    let copy = CopyFileRangeIn {
        fh_in: o.fh,
        nodeid_out: f.nodeid,
        fh_out: o.fh,
        offset_out: 100,
        len: 7,
        ..Default::default()
    };
    assert_eq!(c.copy_file_range(f.nodeid, &copy).err(), erofs);
    assert_eq!(c.access(f.nodeid, libc::W_OK as u32).err(), erofs);
    assert_eq!(c.setxattr(f.nodeid, "user.a", b"1", 0).err(), erofs);
    assert_eq!(c.removexattr(f.nodeid, "user.a").err(), erofs);
    assert_eq!(c.getxattr(f.nodeid, "user.a", 0).err(), Some(libc::ENODATA));

    assert_eq!(fs::read(s.shared.join("f")).unwrap(), b"content");
    assert_eq!(
        fs::metadata(s.shared.join("f")).unwrap().mode() & 0o777,
        0o644
    );
    let after: BTreeSet<_> = fs::read_dir(s.shared.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(before, after);
}

#[test]
fn cache_modes_set_open_flags() {
    for (mode, want, unwanted) in [
        ("--cache=never", FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE),
        ("--cache=always", FOPEN_KEEP_CACHE, FOPEN_DIRECT_IO),
    ] {
        let s = Session::start(&[mode]);
        let c = &s.client;
        let (e, created) = c.create(ROOT, "f", 0o644, RDWR, 0).unwrap();
        let opened = c.open(e.nodeid, RDONLY).unwrap();
        for flags in [created.open_flags, opened.open_flags] {
            assert_eq!(flags & want, want, "{mode}: open_flags {flags:#x}");
            assert_eq!(flags & unwanted, 0, "{mode}: open_flags {flags:#x}");
        }
    }
}

#[test]
fn four_queues_in_parallel() {
    const QUEUES: usize = 4;
    const FILES: usize = 100;
    let s = Session::start_with_queues(&[], QUEUES);
    assert_eq!(s.client.guest().request_queues(), QUEUES);
    std::thread::scope(|scope| {
        for q in 0..QUEUES {
            let c = s.client.on_queue(q);
            scope.spawn(move || {
                for i in 0..FILES {
                    let name = format!("q{q}-{i}");
                    let data = pattern(1000 + i, q as u8);
                    let (e, o) = c.create(ROOT, &name, 0o644, RDWR, 0).expect("CREATE");
                    assert_eq!(
                        c.write(e.nodeid, o.fh, 0, &data).expect("WRITE"),
                        data.len() as u32
                    );
                    assert_eq!(c.read(e.nodeid, o.fh, 0, 4096).expect("READ"), data);
                    assert_eq!(c.lookup(ROOT, &name).expect("LOOKUP").nodeid, e.nodeid);
                    let a = c.getattr(e.nodeid, None).expect("GETATTR");
                    assert_eq!(a.attr.size, data.len() as u64);
                    c.release(e.nodeid, o.fh, RDWR).expect("RELEASE");
                }
            });
        }
    });
    assert_eq!(
        fs::read_dir(s.shared.path()).unwrap().count(),
        QUEUES * FILES
    );
    for q in 0..QUEUES {
        for i in 0..FILES {
            let host = fs::read(s.shared.join(&format!("q{q}-{i}"))).unwrap();
            assert_eq!(host, pattern(1000 + i, q as u8), "q{q}-{i}");
        }
    }
}
