//! Names and symlinks that try to leave the share.

use super::harness::*;

#[test]
fn names_and_symlinks_stay_inside() {
    let mut s = Setup::new();
    let bad_names: [&[u8]; 7] = [b"a/b", b"..", b".", b"/", b"../canary", b"/etc", b"dir/.."];
    for name in bad_names {
        let n = cstr(name);
        let cases: Vec<(u32, Vec<u8>)> = vec![
            (FUSE_LOOKUP, n.clone()),
            (FUSE_MKDIR, cat(&[mkdir_in().as_slice(), &n])),
            (FUSE_CREATE, cat(&[create_in().as_slice(), &n])),
            (FUSE_SYMLINK, cat(&[&n, b"target\0"])),
            (FUSE_MKNOD, cat(&[mknod_in().as_slice(), &n])),
            (FUSE_UNLINK, n.clone()),
            (FUSE_RMDIR, n.clone()),
            (
                FUSE_RENAME,
                cat(&[RenameIn { newdir: ROOT }.as_slice(), &n, b"x\0"]),
            ),
            (
                FUSE_RENAME,
                cat(&[RenameIn { newdir: ROOT }.as_slice(), b"file.txt\0", &n]),
            ),
            (FUSE_RENAME2, rename2_body(&[b"file.txt\0", &n])),
            (
                FUSE_LINK,
                cat(&[
                    LinkIn {
                        oldnodeid: s.nodes.file,
                    }
                    .as_slice(),
                    &n,
                ]),
            ),
        ];
        for (opcode, body) in cases {
            // LOOKUP of "." and "..": the directory itself and its parent (the root's is the
            // root), see tests/windows_requests.rs.
            if opcode == FUSE_LOOKUP && (name == b"." || name == b"..") {
                continue;
            }
            for parent in [ROOT, s.nodes.dir] {
                let errno = s.call_err(opcode, parent, &body, 4096);
                assert_eq!(errno, libc::EINVAL, "opcode {opcode} with name {name:?}");
            }
        }
    }
    s.assert_serving("bad names");

    // A symlink to /etc/passwd is data: READLINK returns it, nothing follows it.
    let e = s
        .client
        .symlink(ROOT, "passwd", "/etc/passwd")
        .expect("SYMLINK");
    assert_eq!(e.attr.mode & libc::S_IFMT, libc::S_IFLNK);
    assert_eq!(s.client.readlink(e.nodeid).unwrap(), b"/etc/passwd");
    assert_eq!(
        fs::read_link(s.share().join("passwd")).unwrap(),
        Path::new("/etc/passwd")
    );
    for flags in [libc::O_RDONLY, libc::O_RDWR, libc::O_WRONLY | libc::O_TRUNC] {
        let r = s.client.open(e.nodeid, flags as u32);
        assert!(
            r.is_err(),
            "OPEN {flags:#o} of a symlink to /etc/passwd: {r:?}"
        );
    }
    assert!(
        s.client.opendir(e.nodeid, 0).is_err(),
        "OPENDIR of a symlink"
    );

    // The same through the symlink to the canary, with operations that would change its
    // target if they followed it.
    let esc = s.nodes.escape;
    for flags in [libc::O_RDONLY, libc::O_WRONLY | libc::O_TRUNC] {
        assert!(
            s.client.open(esc, flags as u32).is_err(),
            "OPEN {flags:#o} followed"
        );
    }
    for attr in [set_size(0), set_mode(0o777), set_uid(4242)] {
        // Changing the link itself is fine (chown); changing the target is not.
        let _ = s.client.setattr(esc, &attr);
    }
    // A hard link of the symlink is another symlink, never a link to the canary.
    if s.client.link(esc, ROOT, "escape-link").is_ok() {
        let m = fs::symlink_metadata(s.share().join("escape-link")).unwrap();
        assert!(m.file_type().is_symlink(), "LINK followed the symlink");
    }
    // Nothing is created or looked up through a symlink used as a directory.
    let mkdir = s.client.mkdir(esc, "x", 0o755, 0);
    assert_eq!(mkdir.err(), Some(libc::ENOTDIR), "MKDIR under a symlink");
    let lookup = s.client.lookup(esc, "x");
    assert_eq!(lookup.err(), Some(libc::ENOTDIR), "LOOKUP under a symlink");
    s.finish("names and symlinks");
}
