//! The `<socket>.pid` file that keeps two daemons off the same socket path.
//!
//! Like virtiofsd, the file holds our pid and is locked with `flock(LOCK_EX | LOCK_NB)` on a
//! descriptor kept open for the life of the [`PidFile`]; a file left by a dead process is not
//! locked and is simply reused.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// A locked pid file; the lock is held, and the file exists, until this is dropped.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    // Keeps the flock: it belongs to this open file description.
    file: File,
    /// Dropped without removing the file ([`PidFile::close_leaving_file`]).
    leave: bool,
}

impl PidFile {
    /// Creates (or reuses a stale) `<socket_path>.pid`, locks it and writes our pid into it
    /// (the sandbox supervisor's in `--sandbox=namespace`: the pid the host sees and signals).
    ///
    /// Fails with [`io::ErrorKind::AlreadyExists`] and the message
    /// `another instance is running (pid N, <path>)` when another open file description
    /// (another process, or another `PidFile` of this one) holds the lock.
    pub fn create(socket_path: &Path) -> io::Result<PidFile> {
        let path = PidFile::path_for(socket_path);
        loop {
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC)
                .open(&path)?;
            // SAFETY: flock on a descriptor we own; no memory is involved.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } < 0 {
                let err = io::Error::last_os_error();
                if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                    return Err(err);
                }
                let mut content = String::new();
                let holder = match file.read_to_string(&mut content) {
                    Ok(_) if !content.trim().is_empty() => content.trim().to_string(),
                    _ => "unknown".to_string(),
                };
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "another instance is running (pid {holder}, {})",
                        path.display()
                    ),
                ));
            }
            // The holder we raced with may have removed the file between our open and our
            // lock: then we locked an unlinked inode and must start again.
            let locked = file.metadata()?;
            match fs::metadata(&path) {
                Ok(current) if current.dev() == locked.dev() && current.ino() == locked.ino() => {}
                _ => continue,
            }
            file.set_len(0)?;
            file.rewind()?;
            // Created before the sandbox forks: this process becomes the namespace sandbox's
            // supervisor, the one the host should signal.
            file.write_all(format!("{}\n", std::process::id()).as_bytes())?;
            return Ok(PidFile {
                path,
                file,
                leave: false,
            });
        }
    }

    /// Takes over the locked pid file of `socket_path` that the process this one upgrades
    /// handed over (`file`, the same open file, so the same lock). It still names that process:
    /// [`PidFile::claim`] writes our pid once we serve.
    pub fn adopt(socket_path: &Path, file: std::os::fd::OwnedFd) -> PidFile {
        PidFile {
            path: PidFile::path_for(socket_path),
            file: File::from(file),
            leave: false,
        }
    }

    /// Writes `pid` (ours as the host sees it) into the pid file open as `file` (an adopted
    /// one, or a duplicate).
    pub fn claim(file: &File, pid: u32) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let pid = format!("{pid}\n");
        file.write_all_at(pid.as_bytes(), 0)?;
        file.set_len(pid.len() as u64)
    }

    /// The open, locked file (handed over by an in-place upgrade).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.file)
    }

    /// The pid file of `socket_path`: `<socket>.pid`.
    pub fn path_for(socket_path: &Path) -> PathBuf {
        let mut name = OsString::from(socket_path.as_os_str());
        name.push(".pid");
        PathBuf::from(name)
    }

    /// The path of the pid file (`<socket>.pid`).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl PidFile {
    /// Closes this fd and leaves the file where it is: a duplicate of the fd (another fd of the
    /// same open file description) keeps the lock, and whoever holds it removes the file.
    pub fn close_leaving_file(mut self) {
        self.leave = true;
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if self.leave {
            return;
        }
        // Only remove the file if it is still ours (not replaced behind our back).
        if let (Ok(ours), Ok(current)) = (self.file.metadata(), fs::metadata(&self.path)) {
            if ours.dev() == current.dev() && ours.ino() == current.ino() {
                let _ = fs::remove_file(&self.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::temp_dir::TempDir;

    #[test]
    fn writes_pid_and_removes_on_drop() {
        let dir = TempDir::new("vhostfs-pidfile").unwrap();
        let socket = dir.join("vm.sock");
        let pid_file = PidFile::create(&socket).unwrap();
        assert_eq!(pid_file.path(), dir.join("vm.sock.pid"));
        let content = fs::read_to_string(pid_file.path()).unwrap();
        assert_eq!(content, format!("{}\n", std::process::id()));
        let mode = fs::metadata(pid_file.path()).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        drop(pid_file);
        assert!(!dir.join("vm.sock.pid").exists());
    }

    #[test]
    fn second_instance_is_refused() {
        let dir = TempDir::new("vhostfs-pidfile").unwrap();
        let socket = dir.join("vm.sock");
        let first = PidFile::create(&socket).unwrap();
        // A second open file description conflicts even within one process.
        let err = PidFile::create(&socket).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(
            err.to_string(),
            format!(
                "another instance is running (pid {}, {})",
                std::process::id(),
                first.path().display()
            )
        );
        // The refused attempt left the holder's file alone.
        assert!(first.path().exists());
        drop(first);
        let again = PidFile::create(&socket).unwrap();
        drop(again);
    }

    #[test]
    fn stale_file_is_reused() {
        let dir = TempDir::new("vhostfs-pidfile").unwrap();
        let socket = dir.join("vm.sock");
        fs::write(
            dir.join("vm.sock.pid"),
            "4194304000 and some longer stale text\n",
        )
        .unwrap();
        let pid_file = PidFile::create(&socket).unwrap();
        let content = fs::read_to_string(pid_file.path()).unwrap();
        assert_eq!(content, format!("{}\n", std::process::id()));
        drop(pid_file);
    }

    #[test]
    fn missing_directory_is_an_error() {
        let dir = TempDir::new("vhostfs-pidfile").unwrap();
        let err = PidFile::create(&dir.join("nope/vm.sock")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
