//! Names and symlinks cannot reach outside the shared directory.

use super::*;

#[test]
fn names_and_symlinks_cannot_escape_the_share() {
    let s = Session::start(&[]);
    let c = &s.client;
    fs::create_dir(s.shared.join("d")).unwrap();
    let d = c.lookup(ROOT, "d").unwrap();
    for parent in [ROOT, d.nodeid] {
        for name in ["a/b", "/etc", "d/.."] {
            assert_eq!(c.lookup(parent, name).err(), Some(libc::EINVAL), "{name}");
        }
        // LOOKUP of "." is the directory, of ".." its parent, the root's parent the root
        // (issue 34, the Windows service): nothing outside the share.
        assert_eq!(c.lookup(parent, ".").map(|e| e.nodeid), Ok(parent));
        assert_eq!(c.lookup(parent, "..").map(|e| e.nodeid), Ok(ROOT));
        assert_eq!(c.mkdir(parent, "..", 0o755, 0).err(), Some(libc::EINVAL));
        assert_eq!(
            c.create(parent, "x/y", 0o644, libc::O_RDWR as u32, 0).err(),
            Some(libc::EINVAL)
        );
        assert_eq!(c.rename(parent, "..", ROOT, "z").err(), Some(libc::EINVAL));
    }

    std::os::unix::fs::symlink("/etc", s.shared.join("etc")).unwrap();
    std::os::unix::fs::symlink("../../..", s.shared.join("up")).unwrap();
    let marker = std::path::Path::new("/vhostfs-escape-marker");
    assert!(!marker.exists());
    for (name, target) in [("etc", "/etc"), ("up", "../../..")] {
        let l = c.lookup(ROOT, name).expect("LOOKUP of a symlink");
        // The symlink itself, never what it points to.
        assert_eq!(l.attr.mode & libc::S_IFMT, libc::S_IFLNK, "{name}");
        assert_eq!(l.attr.size, target.len() as u64);
        let a = c.getattr(l.nodeid, None).unwrap();
        assert_eq!(a.attr.mode & libc::S_IFMT, libc::S_IFLNK);
        assert_eq!(c.readlink(l.nodeid).unwrap(), target.as_bytes());

        assert_eq!(
            c.open(l.nodeid, libc::O_RDONLY as u32).err(),
            Some(libc::ELOOP)
        );
        assert_eq!(c.opendir(l.nodeid, 0).err(), Some(libc::ENOTDIR));
        // READDIR needs a directory fh, which OPENDIR refused; a file fh is refused as well.
        fs::write(s.shared.join("plain"), b"").unwrap();
        let plain = c.lookup(ROOT, "plain").unwrap();
        let po = c.open(plain.nodeid, libc::O_RDONLY as u32).unwrap();
        assert_eq!(
            c.readdir(l.nodeid, po.fh, 0, 4096).err(),
            Some(libc::ENOTDIR)
        );
        c.release(plain.nodeid, po.fh, 0).unwrap();
        for child in ["passwd", "x", "tmp", "vhostfs-escape-marker"] {
            assert_eq!(c.lookup(l.nodeid, child).err(), Some(libc::ENOTDIR));
        }
        let marker_name = "vhostfs-escape-marker";
        assert_eq!(
            c.create(l.nodeid, "x", 0o644, libc::O_RDWR as u32, 0).err(),
            Some(libc::ENOTDIR)
        );
        assert_eq!(
            c.create(l.nodeid, marker_name, 0o644, libc::O_RDWR as u32, 0)
                .err(),
            Some(libc::ENOTDIR)
        );
        assert_eq!(
            c.mkdir(l.nodeid, marker_name, 0o755, 0).err(),
            Some(libc::ENOTDIR)
        );
        assert_eq!(
            c.symlink(l.nodeid, marker_name, "t").err(),
            Some(libc::ENOTDIR)
        );
        assert_eq!(
            c.mknod(l.nodeid, marker_name, libc::S_IFIFO | 0o644, 0, 0)
                .err(),
            Some(libc::ENOTDIR)
        );
        assert_eq!(
            c.tmpfile(l.nodeid, 0o600, libc::O_RDWR as u32, 0).err(),
            Some(libc::ENOTDIR)
        );
        assert_eq!(
            c.link(plain.nodeid, l.nodeid, marker_name).err(),
            Some(libc::ENOTDIR)
        );
        assert_eq!(
            c.rename(ROOT, "plain", l.nodeid, marker_name).err(),
            Some(libc::ENOTDIR)
        );
        assert_eq!(c.unlink(l.nodeid, "passwd").err(), Some(libc::ENOTDIR));
        // Truncating or re-moding through the symlink would change its target.
        let trunc = set_size(0);
        assert_eq!(c.setattr(l.nodeid, &trunc).err(), Some(libc::EINVAL));
        let chmod = set_mode(0o777);
        assert_eq!(c.setattr(l.nodeid, &chmod).err(), Some(libc::EOPNOTSUPP));
    }
    assert!(!marker.exists());
    assert!(!std::path::Path::new("/etc/x").exists());
    assert!(!std::path::Path::new("/etc/vhostfs-escape-marker").exists());
    assert!(fs::read_dir(s.shared.path()).unwrap().all(|e| {
        let n = e.unwrap().file_name();
        ["d", "etc", "up", "plain"].contains(&n.to_str().unwrap())
    }));
}
