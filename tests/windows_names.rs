//! `--windows-names` (issue 34 item 4): host names Windows cannot hold are listed and read as
//! U+F000 + the character and mapped back; names that are fine stay byte-identical; a file
//! named `a:b` on the host can be listed, opened, renamed and deleted by the Windows service's
//! client. Without the option nothing changes.

mod common;

use std::fs;
use std::sync::Arc;

use common::fuse_abi::*;
use common::windows_client::WindowsClient;
use common::Session;

const RESERVED: &str = "\\:*?\"<>|\u{1}\u{1f}";

fn private(c: char) -> char {
    char::from_u32(0xF000 + c as u32).unwrap()
}

fn listing(s: &Session) -> Vec<String> {
    let c = &s.client;
    let d = c.opendir(ROOT, 0).unwrap();
    let mut names: Vec<String> = c
        .readdirplus(ROOT, d.fh, 0, 65536)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.dirent.name).unwrap())
        .filter(|n| n != "." && n != "..")
        .collect();
    c.releasedir(ROOT, d.fh).unwrap();
    names.sort();
    names
}

#[test]
fn each_reserved_character_is_shown_private_and_mapped_back() {
    for fh_mode in ["--inode-file-handles=prefer", "--inode-file-handles=never"] {
        let s = Session::start(&["--windows-names", fh_mode]);
        let c = &s.client;
        for ch in RESERVED.chars() {
            let host = format!("a{ch}b");
            let guest = format!("a{}b", private(ch));
            fs::write(s.shared.join(&host), host.as_bytes()).unwrap();
            assert!(
                listing(&s).contains(&guest),
                "{fh_mode} {ch:?}: {:?}",
                listing(&s)
            );
            // Found by its shown name and by the raw one (WinFsp sends the raw character).
            let e = c.lookup(ROOT, &guest).expect("LOOKUP shown name");
            assert_eq!(c.lookup(ROOT, &host).unwrap().nodeid, e.nodeid);
            let o = c.open(e.nodeid, libc::O_RDONLY as u32).unwrap();
            assert_eq!(c.read(e.nodeid, o.fh, 0, 64).unwrap(), host.as_bytes());
            c.release(e.nodeid, o.fh, 0).unwrap();
            // Renamed and removed by the shown name; the host has the raw characters.
            let guest2 = format!("x{}y", private(ch));
            c.rename(ROOT, &guest, ROOT, &guest2).expect("RENAME");
            assert!(s.shared.join(&format!("x{ch}y")).exists(), "{ch:?}");
            c.unlink(ROOT, &guest2).expect("UNLINK");
            assert!(!s.shared.join(&format!("x{ch}y")).exists());
            // Created by the shown name: the raw name on the host.
            let made = format!("new{}", private(ch));
            let (e, o) = c
                .create(ROOT, &made, 0o644, libc::O_RDWR as u32, 0)
                .unwrap();
            c.release(e.nodeid, o.fh, 0).unwrap();
            assert!(s.shared.join(&format!("new{ch}")).exists(), "{ch:?}");
            c.mkdir(ROOT, &format!("dir{}", private(ch)), 0o755, 0)
                .unwrap();
            assert!(s.shared.join(&format!("dir{ch}")).is_dir(), "{ch:?}");
        }
        // A trailing dot or space.
        let (dot, sp) = (private('.'), private(' '));
        for (host, guest) in [
            ("end.", format!("end{dot}")),
            ("end ", format!("end{sp}")),
            ("end. .", format!("end{dot}{sp}{dot}")),
        ] {
            fs::write(s.shared.join(host), b"x").unwrap();
            assert!(listing(&s).contains(&guest), "{host:?}: {:?}", listing(&s));
            assert!(c.lookup(ROOT, &guest).is_ok(), "{host:?}");
        }
    }
}

#[test]
fn names_that_are_fine_stay_byte_identical() {
    let s = Session::start(&["--windows-names"]);
    let names = [
        "plain.txt",
        ".hidden",
        "a b",
        "a.b.c",
        "ünïcødé",
        "日本語.txt",
        "..x",
        "x..y",
        "\u{F03A}literal",
    ];
    for n in names {
        fs::write(s.shared.join(n), b"x").unwrap();
    }
    let mut want: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    want.sort();
    assert_eq!(listing(&s), want);
    for n in &names[..8] {
        assert!(s.client.lookup(ROOT, n).is_ok(), "{n}");
    }
}

#[test]
fn symlink_targets_both_ways() {
    let s = Session::start(&["--windows-names"]);
    let c = &s.client;
    std::os::unix::fs::symlink("dir./a:b", s.shared.join("l")).unwrap();
    let l = c.lookup(ROOT, "l").unwrap();
    let shown = format!("dir{}/a{}b", private('.'), private(':'));
    assert_eq!(c.readlink(l.nodeid).unwrap(), shown.as_bytes());
    c.symlink(ROOT, "m", &shown).unwrap();
    assert_eq!(
        fs::read_link(s.shared.join("m")).unwrap().to_str().unwrap(),
        "dir./a:b"
    );
}

#[test]
fn without_the_option_names_are_as_on_the_host() {
    let s = Session::start(&[]);
    fs::write(s.shared.join("a:b"), b"x").unwrap();
    assert_eq!(listing(&s), ["a:b"]);
    let shown = format!("a{}b", private(':'));
    assert_eq!(s.client.lookup(ROOT, &shown).err(), Some(libc::ENOENT));
}

/// The Windows service's client: `dir /s` lists `a:b` as `a\u{F03A}b`; opening what Explorer
/// shows (WinFsp turns U+F03A back into `:` for the service, and the service may also pass the
/// private form), renaming and deleting it work.
#[test]
fn the_windows_client_opens_renames_and_deletes_a_colon_name() {
    let s = Session::start(&["--windows-names"]);
    fs::create_dir(s.shared.join("d")).unwrap();
    fs::write(s.shared.join("d/a:b"), b"colon").unwrap();
    let w = WindowsClient::mount(Arc::clone(s.client.guest())).expect("mount");
    let shown = format!("d/a{}b", private(':'));
    assert_eq!(w.dir_s("").unwrap(), ["d".to_string(), shown.clone()]);
    assert_eq!(w.read_file("d/a:b").unwrap(), b"colon");
    assert_eq!(w.read_file(&shown).unwrap(), b"colon");
    w.rename(&shown, &format!("d/c{}d", private('?')), false)
        .expect("rename");
    assert_eq!(fs::read(s.shared.join("d/c?d")).unwrap(), b"colon");
    w.delete("d/c?d").expect("delete");
    assert!(!s.shared.join("d/c?d").exists());
    assert!(w.errors().is_empty(), "{:?}", w.errors());
}
