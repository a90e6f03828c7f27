//! `--preserve-noatime`: by default the guest's O_NOATIME is cleared before the daemon opens the
//! host file (as virtiofsd 1.14 clears it), so an open that the guest allowed cannot fail with
//! EPERM on the host; with the option it is kept (OPEN, CREATE, OPENDIR), and reads through the
//! handle leave the host file's atime alone. Checked on the host: the open flags of the daemon's
//! fd (`/proc/PID/fdinfo`) and the file's atime.

mod common;

use std::fs::{self, File, FileTimes};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::fuse_abi::*;
use common::Session;

const NOATIME: u32 = libc::O_NOATIME as u32;

/// Whether the daemon's one open (non-O_PATH) fd of `name` has O_NOATIME.
fn host_noatime(s: &Session, name: &str) -> bool {
    let ino = fs::metadata(s.shared.join(name)).unwrap().ino();
    let flags = s.host_fd_flags(ino);
    assert_eq!(flags.len(), 1, "{name}: flags of the open fds {flags:?}");
    flags[0] & libc::O_NOATIME != 0
}

/// A host file `name` with 4 bytes, written now, last accessed in 2001.
fn old_atime_file(s: &Session, name: &str) -> SystemTime {
    let path = s.shared.join(name);
    fs::write(&path, b"data").unwrap();
    let atime = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_times(FileTimes::new().set_accessed(atime))
        .unwrap();
    atime
}

/// Opens `name` with `flags`, reads it through the handle, and returns whether the daemon's fd
/// has O_NOATIME and whether the host atime stayed as it was. Releases the handle.
fn open_and_read(s: &Session, name: &str, flags: u32) -> (bool, bool) {
    let atime = old_atime_file(s, name);
    let c = &s.client;
    let e = c.lookup(ROOT, name).expect("LOOKUP");
    let o = c.open(e.nodeid, flags).expect("OPEN");
    assert_eq!(c.read(e.nodeid, o.fh, 0, 4096).expect("READ"), b"data");
    let noatime = host_noatime(s, name);
    let kept = fs::metadata(s.shared.join(name))
        .unwrap()
        .accessed()
        .unwrap()
        == atime;
    c.release(e.nodeid, o.fh, flags).expect("RELEASE");
    c.forget(e.nodeid, 1);
    (noatime, kept)
}

/// CREATE `new` and OPENDIR a new `d` with O_NOATIME; whether the host fd of each kept it.
fn create_and_opendir_with_noatime(s: &Session) -> (bool, bool) {
    let (e, o) = s
        .client
        .create(ROOT, "new", 0o644, RDWR | NOATIME, 0)
        .expect("CREATE");
    let created = host_noatime(s, "new");
    s.client.release(e.nodeid, o.fh, RDWR).unwrap();
    fs::create_dir(s.shared.join("d")).unwrap();
    let d = s.client.lookup(ROOT, "d").unwrap();
    let dh = s
        .client
        .opendir(d.nodeid, RDONLY | NOATIME)
        .expect("OPENDIR");
    let opened = host_noatime(s, "d");
    s.client.releasedir(d.nodeid, dh.fh).unwrap();
    (created, opened)
}

#[test]
fn o_noatime_is_cleared_by_default() {
    let s = Session::start(&[]);
    // Cleared: the host fd lacks it, and the read updates the atime (relatime: atime < mtime).
    assert_eq!(open_and_read(&s, "a", RDONLY | NOATIME), (false, false));
    assert_eq!(create_and_opendir_with_noatime(&s), (false, false));
}

#[test]
fn preserve_noatime_keeps_it() {
    let s = Session::start(&["--preserve-noatime"]);
    assert_eq!(open_and_read(&s, "a", RDONLY | NOATIME), (true, true));
    // Only when the guest asked for it.
    assert_eq!(open_and_read(&s, "b", RDONLY), (false, false));
    assert_eq!(create_and_opendir_with_noatime(&s), (true, true));
}

/// Why it is cleared by default: without CAP_FOWNER the host refuses O_NOATIME on a file the
/// daemon does not own, although the guest (whose root may) asked for it.
#[test]
fn without_cap_fowner_only_the_default_opens_a_file_of_another_owner() {
    for (extra, expect) in [
        (&["--modcaps=-fowner"][..], Ok(())),
        (
            &["--modcaps=-fowner", "--preserve-noatime"],
            Err(libc::EPERM),
        ),
    ] {
        let s = Session::start(extra);
        let path = s.shared.join("theirs");
        fs::write(&path, b"data").unwrap();
        std::os::unix::fs::chown(&path, Some(1000), Some(1000)).unwrap();
        let e = s.client.lookup(ROOT, "theirs").unwrap();
        let opened = s.client.open(e.nodeid, RDONLY | NOATIME);
        assert_eq!(
            opened.as_ref().map(drop).map_err(|e| *e),
            expect,
            "{extra:?}"
        );
        if let Ok(o) = opened {
            s.client.release(e.nodeid, o.fh, RDONLY).unwrap();
        }
        // Without O_NOATIME the file opens either way.
        let o = s.client.open(e.nodeid, RDONLY).expect("OPEN");
        s.client.release(e.nodeid, o.fh, RDONLY).unwrap();
    }
}
