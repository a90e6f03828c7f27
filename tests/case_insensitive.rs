//! `--case-insensitive` (issue 34 item 3): names match ignoring case (Unicode simple folding)
//! in every operation that takes a name; a name another name folds alike to cannot be created,
//! also by 16 creators on 4 queues at once (virtio-win issue 1620: `foo` and `FOO` both made);
//! case-only renames; the host changing the directory is seen. Without the option nothing
//! changes.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::sync::{Arc, Barrier};

use common::fuse_abi::*;
use common::windows_client::WindowsClient;
use common::Session;

const CI: &str = "--case-insensitive";
const RDWR: u32 = libc::O_RDWR as u32;
const EXCL: u32 = (libc::O_RDWR | libc::O_CREAT | libc::O_EXCL) as u32;

fn host_names(s: &Session) -> BTreeSet<String> {
    fs::read_dir(s.shared.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

fn read(s: &Session, nodeid: u64) -> Vec<u8> {
    let c = &s.client;
    let o = c.open(nodeid, libc::O_RDONLY as u32).unwrap();
    let d = c.read(nodeid, o.fh, 0, 4096).unwrap();
    c.release(nodeid, o.fh, 0).unwrap();
    d
}

#[test]
fn lookups_by_any_case() {
    for fh_mode in ["--inode-file-handles=prefer", "--inode-file-handles=never"] {
        let s = Session::start(&[CI, fh_mode]);
        let c = &s.client;
        fs::write(s.shared.join("Foo.TXT"), b"foo").unwrap();
        fs::write(s.shared.join("ÄRGER.txt"), b"unicode").unwrap();
        fs::write(s.shared.join("σίσυφος"), b"sigma").unwrap();
        fs::create_dir(s.shared.join("Dir")).unwrap();
        fs::write(s.shared.join("Dir/Inner"), b"inner").unwrap();
        let e = c.lookup(ROOT, "foo.txt").expect("foo.txt");
        assert_eq!(read(&s, e.nodeid), b"foo", "{fh_mode}");
        assert_eq!(c.lookup(ROOT, "FOO.txt").unwrap().nodeid, e.nodeid);
        assert_eq!(c.lookup(ROOT, "Foo.TXT").unwrap().nodeid, e.nodeid);
        let e = c
            .lookup(ROOT, "ärger.TXT")
            .expect("Unicode, not ASCII only");
        assert_eq!(read(&s, e.nodeid), b"unicode");
        let e = c.lookup(ROOT, "ΣΊΣΥΦΟΣ").expect("final sigma");
        assert_eq!(read(&s, e.nodeid), b"sigma");
        let d = c.lookup(ROOT, "DIR").unwrap();
        assert_eq!(
            read(&s, c.lookup(d.nodeid, "inner").unwrap().nodeid),
            b"inner"
        );
        assert_eq!(c.lookup(ROOT, "bar").err(), Some(libc::ENOENT));
        // Names that are not the same stay apart.
        assert_eq!(c.lookup(ROOT, "foo.txt2").err(), Some(libc::ENOENT));
    }
}

#[test]
fn several_host_names_folding_alike_exact_first_then_byte_order() {
    let s = Session::start(&[CI]);
    let c = &s.client;
    for n in ["foo", "Foo", "FOO"] {
        fs::write(s.shared.join(n), n.as_bytes()).unwrap();
    }
    for n in ["foo", "Foo", "FOO"] {
        let e = c.lookup(ROOT, n).unwrap();
        assert_eq!(read(&s, e.nodeid), n.as_bytes(), "exact {n}");
    }
    // No exact match: the first in byte order ("FOO" < "Foo" < "foo").
    let e = c.lookup(ROOT, "fOO").unwrap();
    assert_eq!(read(&s, e.nodeid), b"FOO");
}

#[test]
fn no_name_is_created_when_another_folds_alike() {
    let s = Session::start(&[CI]);
    let c = &s.client;
    fs::write(s.shared.join("Taken"), b"taken").unwrap();
    assert_eq!(
        c.create(ROOT, "TAKEN", 0o644, EXCL, 0).err(),
        Some(libc::EEXIST)
    );
    assert_eq!(c.mkdir(ROOT, "taken", 0o755, 0).err(), Some(libc::EEXIST));
    assert_eq!(c.symlink(ROOT, "tAKEN", "x").err(), Some(libc::EEXIST));
    assert_eq!(
        c.mknod(ROOT, "TaKeN", libc::S_IFIFO | 0o644, 0, 0).err(),
        Some(libc::EEXIST)
    );
    let (f, o) = c.create(ROOT, "other", 0o644, EXCL, 0).unwrap();
    c.release(f.nodeid, o.fh, 0).unwrap();
    assert_eq!(c.link(f.nodeid, ROOT, "TAKEN").err(), Some(libc::EEXIST));
    assert_eq!(host_names(&s), ["Taken", "other"].map(String::from).into());
    // CREATE without O_EXCL opens the file that folds alike.
    let (e, o) = c
        .create(ROOT, "TAKEN", 0o644, RDWR | libc::O_CREAT as u32, 0)
        .unwrap();
    assert_eq!(c.read(e.nodeid, o.fh, 0, 64).unwrap(), b"taken");
    c.release(e.nodeid, o.fh, 0).unwrap();
    assert_eq!(host_names(&s), ["Taken", "other"].map(String::from).into());
}

/// virtio-win issue 1620: 16 creators of case-alike names on 4 queues, at once, 20 rounds:
/// exactly one wins each round, the others get EEXIST.
#[test]
fn sixteen_concurrent_creators_of_case_alike_names_one_wins() {
    let s = Session::start_with_queues(&[CI], 4);
    for round in 0..20 {
        let base = format!("steamapps{round}");
        let variants: Vec<String> = (0..16u32)
            .map(|i| {
                base.chars()
                    .enumerate()
                    .map(|(k, ch)| {
                        if k < 4 && i & (1 << k) != 0 {
                            ch.to_ascii_uppercase()
                        } else {
                            ch
                        }
                    })
                    .collect()
            })
            .collect();
        let barrier = Arc::new(Barrier::new(16));
        let results: Vec<Result<(), i32>> = std::thread::scope(|scope| {
            let handles: Vec<_> = variants
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let c = s.client.on_queue(i % 4);
                    let barrier = Arc::clone(&barrier);
                    scope.spawn(move || {
                        barrier.wait();
                        if i % 2 == 0 {
                            c.create(ROOT, name, 0o644, EXCL, 0).map(|(e, o)| {
                                c.release(e.nodeid, o.fh, 0).unwrap();
                            })
                        } else {
                            c.mkdir(ROOT, name, 0o755, 0).map(drop)
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {results:?}");
        assert!(results
            .iter()
            .all(|r| matches!(r, Ok(()) | Err(libc::EEXIST))));
        let on_host = host_names(&s)
            .into_iter()
            .filter(|n| n.eq_ignore_ascii_case(&base))
            .count();
        assert_eq!(on_host, 1, "round {round}");
    }
}

#[test]
fn renames_and_removals_by_any_case() {
    let s = Session::start(&[CI]);
    let c = &s.client;
    fs::write(s.shared.join("foo"), b"foo").unwrap();
    // A case-only rename of the file itself.
    c.rename(ROOT, "foo", ROOT, "FOO")
        .expect("case-only rename");
    assert_eq!(host_names(&s), ["FOO"].map(String::from).into());
    c.rename(ROOT, "fOo", ROOT, "Foo")
        .expect("case-only rename by another case");
    assert_eq!(host_names(&s), ["Foo"].map(String::from).into());
    // Onto a case-alike name of another file: EEXIST with NOREPLACE, replaced without.
    fs::write(s.shared.join("bar"), b"bar").unwrap();
    assert_eq!(
        c.rename2(ROOT, "BAR", ROOT, "FOO", libc::RENAME_NOREPLACE)
            .err(),
        Some(libc::EEXIST)
    );
    assert_eq!(host_names(&s), ["Foo", "bar"].map(String::from).into());
    c.rename(ROOT, "BAR", ROOT, "FOO")
        .expect("replace a case-alike name");
    assert_eq!(host_names(&s), ["FOO"].map(String::from).into());
    assert_eq!(fs::read(s.shared.join("FOO")).unwrap(), b"bar");
    // Into another directory, by any case.
    fs::create_dir(s.shared.join("Sub")).unwrap();
    let sub = c.lookup(ROOT, "sub").unwrap();
    c.rename(ROOT, "foo", sub.nodeid, "Moved").unwrap();
    assert_eq!(fs::read(s.shared.join("Sub/Moved")).unwrap(), b"bar");
    // UNLINK and RMDIR by any case.
    c.unlink(sub.nodeid, "MOVED").expect("unlink");
    c.rmdir(ROOT, "SUB").expect("rmdir");
    assert!(host_names(&s).is_empty());
    assert_eq!(c.unlink(ROOT, "nothing").err(), Some(libc::ENOENT));
}

/// The host changes the directory after the guest's lookups read its names: a create, a
/// rename and a delete are seen by the next lookups.
#[test]
fn host_changes_to_the_directory_are_seen() {
    let s = Session::start(&[CI]);
    let c = &s.client;
    for i in 0..1000 {
        fs::write(s.shared.join(&format!("File{i}")), b"x").unwrap();
    }
    assert!(c.lookup(ROOT, "file7").is_ok());
    fs::write(s.shared.join("NewOne"), b"new").unwrap();
    assert_eq!(read(&s, c.lookup(ROOT, "newone").unwrap().nodeid), b"new");
    fs::rename(s.shared.join("NewOne"), s.shared.join("Renamed")).unwrap();
    assert_eq!(c.lookup(ROOT, "NEWONE").err(), Some(libc::ENOENT));
    assert_eq!(read(&s, c.lookup(ROOT, "renamed").unwrap().nodeid), b"new");
    fs::remove_file(s.shared.join("Renamed")).unwrap();
    assert_eq!(c.lookup(ROOT, "RENAMED").err(), Some(libc::ENOENT));
    // The guest's own creates keep the listing: a case-alike create is refused at once.
    c.mkdir(ROOT, "Made", 0o755, 0).unwrap();
    assert_eq!(c.mkdir(ROOT, "MADE", 0o755, 0).err(), Some(libc::EEXIST));
    // And the host creating a case-alike of a new name is seen too.
    fs::write(s.shared.join("HOSTMADE"), b"h").unwrap();
    assert_eq!(
        c.create(ROOT, "hostmade", 0o644, EXCL, 0).err(),
        Some(libc::EEXIST)
    );
}

/// A guest that looks names up in another case again and again (a program that spells its
/// files its own way): the daemon then reads the directory's kept names first and skips the
/// exact lookup that would fail. The answers stay those of the exact-first order: an exact
/// name wins over a case-alike one, the first in byte order among several, names the host adds
/// or removes meanwhile are seen, a name in no case is ENOENT.
#[test]
fn lookups_in_another_case_in_a_row_answer_as_exact_first() {
    let s = Session::start(&[CI]);
    let c = &s.client;
    for n in ["foo", "Foo", "FOO", "Bar.txt", "Other.txt"] {
        fs::write(s.shared.join(n), n.as_bytes()).unwrap();
    }
    let in_another_case = || {
        for _ in 0..8 {
            assert_eq!(
                read(&s, c.lookup(ROOT, "OTHER.TXT").unwrap().nodeid),
                b"Other.txt"
            );
        }
    };
    for n in ["foo", "Foo", "FOO"] {
        in_another_case();
        assert_eq!(
            read(&s, c.lookup(ROOT, n).unwrap().nodeid),
            n.as_bytes(),
            "exact {n}"
        );
    }
    in_another_case();
    assert_eq!(read(&s, c.lookup(ROOT, "fOO").unwrap().nodeid), b"FOO");
    in_another_case();
    assert_eq!(c.lookup(ROOT, "nothing").err(), Some(libc::ENOENT));
    // The host adds the exact name: it wins from the next lookup on.
    in_another_case();
    fs::write(s.shared.join("BAR.TXT"), b"exact").unwrap();
    for _ in 0..4 {
        assert_eq!(
            read(&s, c.lookup(ROOT, "BAR.TXT").unwrap().nodeid),
            b"exact"
        );
    }
    // The host adds a name and removes another.
    in_another_case();
    fs::write(s.shared.join("Late.txt"), b"late").unwrap();
    fs::remove_file(s.shared.join("Bar.txt")).unwrap();
    assert_eq!(
        read(&s, c.lookup(ROOT, "LATE.TXT").unwrap().nodeid),
        b"late"
    );
    assert_eq!(
        c.lookup(ROOT, "bar.txt").unwrap().nodeid,
        c.lookup(ROOT, "BAR.TXT").unwrap().nodeid
    );
    fs::remove_file(s.shared.join("BAR.TXT")).unwrap();
    assert_eq!(c.lookup(ROOT, "bar.TXT").err(), Some(libc::ENOENT));
}

#[test]
fn without_the_option_case_matters() {
    let s = Session::start(&[]);
    let c = &s.client;
    fs::write(s.shared.join("Foo.TXT"), b"foo").unwrap();
    assert_eq!(c.lookup(ROOT, "foo.txt").err(), Some(libc::ENOENT));
    let (e, o) = c.create(ROOT, "FOO.TXT", 0o644, EXCL, 0).unwrap();
    c.release(e.nodeid, o.fh, 0).unwrap();
    assert_eq!(host_names(&s).len(), 2);
}

/// The Windows service's client: copying `FOO` into a folder with `foo` fails instead of
/// making a second file (virtio-win issue 1620), opening by another case reads the file.
#[test]
fn the_windows_client_cannot_make_foo_and_foo() {
    let s = Session::start(&[CI]);
    fs::write(s.shared.join("foo"), b"first").unwrap();
    let w = WindowsClient::mount(Arc::clone(s.client.guest())).expect("mount");
    assert_eq!(w.read_file("FOO").unwrap(), b"first");
    // The service's walk finds FOO (it exists by another case): its copy then overwrites.
    assert!(w.copy_in("FOO", b"second").is_err());
    w.overwrite("FOO", b"second").unwrap();
    assert_eq!(host_names(&s), ["foo"].map(String::from).into());
    assert_eq!(fs::read(s.shared.join("foo")).unwrap(), b"second");
}
