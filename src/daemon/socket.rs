//! The vhost-user socket: created at `--socket-path` (mode 0700, or 0770 with the group of
//! `--socket-group`, as virtiofsd 1.14 creates it), or inherited (`--fd`, systemd socket
//! activation) and checked to be a listening UNIX stream socket. All of it runs on the host,
//! before the sandbox, while the process has one thread.

use std::ffi::CString;
use std::fs;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixListener;
use std::path::Path;

use vhost::vhost_user::Listener;

use crate::cli::SocketSource;
use crate::systemd;

/// Sets the process's file mode creation mask; returns the previous one.
pub(super) fn umask(mask: libc::mode_t) -> libc::mode_t {
    // SAFETY: umask only swaps a process attribute and cannot fail. It is process-wide: callers
    // run while the process has one thread (before the sandbox), or want it for every thread.
    unsafe { libc::umask(mask) }
}

/// The group `--socket-group` names, looked up in the group database.
#[derive(Clone, Debug)]
pub(super) struct SocketGroup {
    name: String,
    gid: libc::gid_t,
}

impl SocketGroup {
    /// Looks `name` up (/etc/group or NSS). A name only, as virtiofsd takes it: a number that
    /// names no group is no group.
    pub(super) fn resolve(name: &str) -> Result<SocketGroup, String> {
        let no_such = || format!("--socket-group {name}: no such group");
        let cname = CString::new(name).map_err(|_| no_such())?;
        let mut buf: Vec<libc::c_char> = vec![0; 1024];
        loop {
            let mut group = MaybeUninit::<libc::group>::uninit();
            let mut found: *mut libc::group = std::ptr::null_mut();
            // SAFETY: `cname` is a C string; `group` and `buf` (with its true length) are
            // writable and outlive the call; `found` is a valid out-pointer.
            let rc = unsafe {
                libc::getgrnam_r(
                    cname.as_ptr(),
                    group.as_mut_ptr(),
                    buf.as_mut_ptr(),
                    buf.len(),
                    &mut found,
                )
            };
            match rc {
                0 if found.is_null() => return Err(no_such()),
                0 => {
                    // SAFETY: on success `found` points to `group`, which getgrnam_r filled.
                    let gid = unsafe { group.assume_init() }.gr_gid;
                    return Ok(SocketGroup {
                        name: name.to_string(),
                        gid,
                    });
                }
                libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
                // Some NSS modules report a missing group as an error.
                libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Err(no_such()),
                e => {
                    return Err(format!(
                        "--socket-group {name}: cannot look the group up: {}",
                        io::Error::from_raw_os_error(e)
                    ))
                }
            }
        }
    }
}

/// The longest path a UNIX socket can be bound at: `sun_path` holds 108 bytes on Linux, and the
/// standard library keeps one for the terminating NUL.
const SUN_PATH_MAX: usize = 107;

/// Binds and listens on `path`: mode 0700, or 0770 and `group` as its group.
///
/// The socket appears at `path` only once it listens, with its mode and group: it is bound under
/// a staging name beside `path` (`PATH.PID`), given the group and renamed into place. A frontend
/// started as soon as the file exists (a launcher that polls for it) would otherwise find it
/// bound but not yet listening and fail with ECONNREFUSED, and a member of the group would find
/// it owned by our own group. It is bound in place, with those two short windows, as virtiofsd
/// binds it, when the staging name does not fit (over `SUN_PATH_MAX` bytes) or cannot be
/// bound or renamed (a path-based security policy that allows the socket's own path only).
pub(super) fn bind_socket(
    path: &Path,
    group: Option<&SocketGroup>,
) -> Result<UnixListener, String> {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{}", std::process::id()));
    bind_socket_via(path, Path::new(&name), group)
}

/// [`bind_socket`] with the staging name `staging`.
fn bind_socket_via(
    path: &Path,
    staging: &Path,
    group: Option<&SocketGroup>,
) -> Result<UnixListener, String> {
    if staging.as_os_str().len() <= SUN_PATH_MAX {
        match place_socket(staging, path, group) {
            Ok(listener) => return Ok(listener),
            Err(e) => log::debug!("{e}: binding the socket in place"),
        }
    }
    place_socket(path, path, group)
}

/// Binds and listens at `at` with the mode and group of [`bind_socket`], then renames it to
/// `path` (when `at` is another name). On failure nothing is left at `at`.
fn place_socket(
    at: &Path,
    path: &Path,
    group: Option<&SocketGroup>,
) -> Result<UnixListener, String> {
    // The mode comes from the umask at bind time (not a chmod after), so the socket is never
    // connectable by more than it should be. The process umask is 0 otherwise.
    let old = umask(if group.is_some() { 0o007 } else { 0o077 });
    let _ = fs::remove_file(at);
    let bound = UnixListener::bind(at);
    umask(old);
    let listener = bound.map_err(|e| format!("socket {}: {e}", at.display()))?;
    if let Err(e) = give_group_and_rename(at, path, group) {
        let _ = fs::remove_file(at);
        return Err(e);
    }
    Ok(listener)
}

/// The rest of [`place_socket`] once the socket at `at` listens: `group` given, renamed to `path`.
fn give_group_and_rename(
    at: &Path,
    path: &Path,
    group: Option<&SocketGroup>,
) -> Result<(), String> {
    if let Some(g) = group {
        // By path: a chown of the fd would change the socket, not the file QEMU connects to.
        std::os::unix::fs::lchown(at, None, Some(g.gid)).map_err(|e| {
            format!(
                "socket {}: cannot give it the group {} (gid {}) of --socket-group: {e}",
                path.display(),
                g.name,
                g.gid
            )
        })?;
    }
    if at != path {
        fs::rename(at, path).map_err(|e| format!("socket {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Reads an integer socket option of `fd` (SOL_SOCKET level).
fn socket_option(fd: RawFd, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: valid out pointers of the right size.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(value)
}

/// Checks that an inherited socket (`what`: `--fd N` or systemd's) is a listening UNIX stream
/// socket, as vhost-user needs: a bound but not listening socket would make the frontend's
/// connect fail with ECONNREFUSED while the daemon waits forever.
fn check_listening(fd: RawFd, what: &str) -> Result<(), String> {
    let get = |name, option| socket_option(fd, name).map_err(|e| format!("{what}: {option}: {e}"));
    if get(libc::SO_DOMAIN, "SO_DOMAIN")? != libc::AF_UNIX
        || get(libc::SO_TYPE, "SO_TYPE")? != libc::SOCK_STREAM
    {
        return Err(format!(
            "{what}: not a UNIX stream socket (vhost-user needs AF_UNIX, SOCK_STREAM)"
        ));
    }
    if get(libc::SO_ACCEPTCONN, "SO_ACCEPTCONN")? == 0 {
        return Err(format!(
            "{what}: the socket is not listening (the caller must bind() and listen() before \
             passing it)"
        ));
    }
    Ok(())
}

/// Whether some process listens on the UNIX socket bound at `path`, from /proc/net/unix (a
/// connect() would do, but would take the one connection a vhost-user daemon serves). A socket
/// [`bind_socket`] made is listed under its staging name, `PATH.PID`.
fn is_listening_at(path: &Path) -> bool {
    const SO_ACCEPTCON_FLAG: u32 = 0x0001_0000;
    let Ok(table) = fs::read_to_string("/proc/net/unix") else {
        return false;
    };
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // `path` itself, or `path` followed by `.` and a pid.
    let names = |bound: &str| -> bool {
        [path, absolute.as_path()].iter().any(|p| {
            let rest = bound
                .as_bytes()
                .strip_prefix(p.as_os_str().as_encoded_bytes());
            rest.is_some_and(|rest| {
                rest.is_empty()
                    || rest
                        .strip_prefix(b".")
                        .is_some_and(|pid| !pid.is_empty() && pid.iter().all(u8::is_ascii_digit))
            })
        })
    };
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let listening = fields
            .get(3)
            .and_then(|f| u32::from_str_radix(f, 16).ok())
            .is_some_and(|flags| flags & SO_ACCEPTCON_FLAG != 0);
        listening && fields.get(7).is_some_and(|bound| names(bound))
    })
}

/// Checks the socket path before it is (re)created: a file that is not a socket is never
/// replaced, nor a socket that a live process (without our pid file) listens on; a stale socket
/// file is replaced.
pub(super) fn check_socket_path(path: &Path) -> Result<(), String> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("socket {}: {e}", path.display())),
        Ok(m) if !m.file_type().is_socket() => Err(format!(
            "socket {}: the path exists and is not a socket; refusing to replace it",
            path.display()
        )),
        Ok(_) if is_listening_at(path) => Err(format!(
            "socket {}: in use, a live process is listening on it (another vhostfs or virtiofsd?)",
            path.display()
        )),
        Ok(_) => {
            log::info!("replacing the stale socket file {}", path.display());
            Ok(())
        }
    }
}

/// The listening socket, as given by `Config::socket` (a socket path is already guarded by
/// our pid file); a created one gets `group` (`--socket-group`, only with a socket path).
pub(super) fn open_listener(
    socket: &SocketSource,
    group: Option<&SocketGroup>,
    activation: Option<systemd::ActivationSocket>,
) -> Result<Listener, String> {
    match (socket, activation) {
        (SocketSource::Path(path), _) => {
            check_socket_path(path)?;
            // Bound here rather than by `Listener::new`, whose listener unlinks its path when
            // dropped: inside the sandbox that path would name a file of the share.
            let _ = fs::remove_file(path);
            Ok(Listener::from(bind_socket(path, group)?))
        }
        (SocketSource::Fd(fd), _) => {
            check_listening(*fd, &format!("--fd {fd}"))?;
            // SAFETY: the command line checked that the fd is open; we take it over.
            Ok(unsafe { Listener::from_raw_fd(*fd) })
        }
        (SocketSource::Activation, Some(sock)) => {
            let what = match &sock.name {
                Some(name) => format!("the socket from systemd ({name})"),
                None => "the socket from systemd".to_string(),
            };
            check_listening(sock.fd.as_raw_fd(), &what)?;
            log::info!("using {what}");
            // SAFETY: we own the fd; the listener takes it over.
            Ok(unsafe { Listener::from_raw_fd(sock.fd.into_raw_fd()) })
        }
        (SocketSource::Activation, None) => Err(
            "missing \"--socket-path\" or \"--fd\" option (and no socket from systemd socket \
             activation: LISTEN_PID/LISTEN_FDS unset)"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temp_dir::TempDir;
    use std::os::unix::net::UnixStream;

    #[test]
    fn the_socket_is_renamed_into_place_and_the_staging_name_goes() {
        let dir = TempDir::new("sock-staged").unwrap();
        let (path, staging) = (dir.join("s.sock"), dir.join("s.sock.1"));
        let _listener = bind_socket_via(&path, &staging, None).unwrap();
        UnixStream::connect(&path).expect("listening at the path");
        assert!(!staging.exists());
    }

    /// A staging name that cannot be bound (here a directory is there; a path-based security
    /// policy refuses it the same way) makes the socket bound in place, not an error.
    #[test]
    fn a_staging_name_that_cannot_be_bound_binds_in_place() {
        let dir = TempDir::new("sock-in-place").unwrap();
        let (path, staging) = (dir.join("s.sock"), dir.join("s.sock.1"));
        fs::create_dir(&staging).unwrap();
        let _listener = bind_socket_via(&path, &staging, None).unwrap();
        UnixStream::connect(&path).expect("listening at the path");
        assert!(staging.is_dir(), "the directory in the way is left alone");
    }

    /// The in-place bind's own failure is the error.
    #[test]
    fn when_neither_name_can_be_bound_the_error_names_the_path() {
        let dir = TempDir::new("sock-none").unwrap();
        let path = dir.join("missing/s.sock");
        let e = bind_socket_via(&path, &dir.join("missing/s.sock.1"), None).unwrap_err();
        assert!(
            e.starts_with(&format!("socket {}: ", path.display())),
            "{e}"
        );
    }
}
