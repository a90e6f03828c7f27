//! The open + read part of the Windows walk: every file of the share opened, read (4 KiB) and
//! closed by `--threads` dispatchers with a request in flight each, driven from one thread
//! ([`TestGuest::drive`]). Per file, request for request, what `WindowsClient::open`, `read` and
//! `close` send for the path `dir/file`: the path walked twice from node 1 (`LOOKUP(1, dir)`,
//! `LOOKUP(dir, file)`, twice), OPEN (O_RDONLY), GETATTR with FUSE_GETATTR_FH, READ of 4 KiB,
//! RELEASE (flags 0); every reply checked, every LOOKUP counted as a lookup held. Threads that
//! each wait for their reply cost two thread switches per request: on this 2-core machine that
//! client took more CPU than either daemon and set the pace of both.

use std::collections::{HashMap, HashSet};

use vm_memory::ByteValued;

use crate::common::fuse_abi::*;
use crate::common::fuse_client::from_bytes;
use crate::common::windows_client::WindowsClient;
use crate::common::{FuseClient, TestGuest};
use crate::report::{by_opcode, op_name};
use crate::walk::{content, dir_name, file_name, Layout};

/// Reply header size.
const HDR: usize = std::mem::size_of::<OutHeader>();
/// What an application reads first.
pub const READ_SIZE: u32 = 4096;
/// Requests per file: two walks of two LOOKUPs, OPEN, GETATTR, READ, RELEASE.
const STEPS: usize = 8;

/// What the dispatchers did.
#[derive(Default)]
pub struct Tally {
    pub files: usize,
    pub replies: HashMap<u32, u64>,
    pub errors: HashMap<u32, u64>,
    /// Node IDs looked up that `dir /s` had not handed out (none expected).
    pub new_nodes: HashSet<u64>,
}

/// One dispatcher: the file it is at and the next of its `STEPS` requests.
#[derive(Default)]
struct Slot {
    file: usize,
    step: usize,
    dnode: u64,
    fnode: u64,
    fh: u64,
    request: Vec<u8>,
}

fn names(l: Layout, file: usize) -> (String, String) {
    (
        dir_name(file / l.files_per_dir),
        file_name(file % l.files_per_dir),
    )
}

fn cstr(name: &str) -> Vec<u8> {
    let mut b = name.as_bytes().to_vec();
    b.push(0);
    b
}

/// The slot's next request and its reply buffer length.
fn request(c: &FuseClient, l: Layout, s: &Slot) -> (Vec<u8>, usize) {
    let (dir, file) = names(l, s.file);
    match s.step {
        0 | 2 => (c.request(FUSE_LOOKUP, ROOT, &cstr(&dir)), HDR + 128),
        1 | 3 => (c.request(FUSE_LOOKUP, s.dnode, &cstr(&file)), HDR + 128),
        4 => {
            let inp = OpenIn {
                flags: libc::O_RDONLY as u32,
                fuse_flags: 0,
            };
            (c.request(FUSE_OPEN, s.fnode, inp.as_slice()), HDR + 16)
        }
        5 => {
            let inp = GetattrIn {
                flags: FUSE_GETATTR_FH,
                dummy: 0,
                fh: s.fh,
            };
            (c.request(FUSE_GETATTR, s.fnode, inp.as_slice()), HDR + 104)
        }
        6 => {
            let inp = ReadIn {
                fh: s.fh,
                offset: 0,
                size: READ_SIZE,
                ..Default::default()
            };
            let len = HDR + READ_SIZE as usize;
            (c.request(FUSE_READ, s.fnode, inp.as_slice()), len)
        }
        _ => {
            let inp = ReleaseIn {
                fh: s.fh,
                ..Default::default()
            };
            (c.request(FUSE_RELEASE, s.fnode, inp.as_slice()), HDR)
        }
    }
}

/// Check the reply to the slot's request and keep what the next requests need.
fn answer(
    w: &WindowsClient,
    l: Layout,
    s: &mut Slot,
    reply: &[u8],
    t: &mut Tally,
) -> Result<(), String> {
    let opcode = u32::from_le_bytes(s.request[4..8].try_into().unwrap());
    *t.replies.entry(opcode).or_default() += 1;
    let (dir, file) = names(l, s.file);
    let body = FuseClient::parse_reply(&s.request, reply).map_err(|errno| {
        *t.errors.entry(opcode).or_default() += 1;
        format!(
            "{} {dir}/{file}: {}",
            op_name(opcode),
            std::io::Error::from_raw_os_error(errno)
        )
    })?;
    let mut held = |id: u64| {
        if w.held(id) == 0 {
            t.new_nodes.insert(id);
        }
    };
    let wrong = |what: String| Err(format!("{} {dir}/{file}: {what}", op_name(opcode)));
    match s.step {
        0 | 2 => {
            let e: EntryOut = from_bytes(&body, "LOOKUP");
            if e.attr.mode & libc::S_IFMT != libc::S_IFDIR {
                return wrong(format!("mode {:o}, a directory expected", e.attr.mode));
            }
            held(e.nodeid);
            s.dnode = e.nodeid;
        }
        1 | 3 => {
            let e: EntryOut = from_bytes(&body, "LOOKUP");
            if s.step == 3 && e.nodeid != s.fnode {
                return wrong(format!("node {}, {} the first time", e.nodeid, s.fnode));
            }
            held(e.nodeid);
            s.fnode = e.nodeid;
        }
        4 => s.fh = from_bytes::<OpenOut>(&body, "OPEN").fh,
        5 => {
            let size = from_bytes::<AttrOut>(&body, "GETATTR").attr.size;
            let want = content(&dir, &file).len() as u64;
            if size != want {
                return wrong(format!("size {size}, {want} expected"));
            }
        }
        6 => {
            let want = content(&dir, &file);
            if body != want {
                return wrong(format!(
                    "{:?}, {:?} expected",
                    String::from_utf8_lossy(&body),
                    String::from_utf8_lossy(&want)
                ));
            }
        }
        _ => t.files += 1,
    }
    Ok(())
}

/// Open + read + close every file of the share with `slots` dispatchers on request queue 0 of
/// `guest` (the one `w` is mounted on).
pub fn read_all(
    guest: &TestGuest,
    c: &FuseClient,
    w: &WindowsClient,
    l: Layout,
    slots: usize,
) -> Result<Tally, String> {
    let total = l.tree_dirs * l.files_per_dir;
    let mut next_file = 0;
    let mut state: Vec<Slot> = (0..slots).map(|_| Slot::default()).collect();
    let mut t = Tally::default();
    let mut error = None;
    let driven = guest.drive(0, slots, |i, reply| {
        let s = &mut state[i];
        if let Some(reply) = reply {
            if let Err(e) = answer(w, l, s, &reply, &mut t) {
                error.get_or_insert(e);
            }
            s.step = (s.step + 1) % STEPS;
        }
        if error.is_some() || s.step == 0 && next_file == total {
            return None;
        }
        if s.step == 0 {
            s.file = next_file;
            next_file += 1;
        }
        let (req, reply_len) = request(c, l, s);
        s.request = req.clone();
        Some((req, reply_len))
    });
    if let Some(e) = error {
        return Err(format!(
            "{e}; error replies of open + read {}",
            by_opcode(&t.errors)
        ));
    }
    driven.map_err(|e| format!("open + read: {e}"))?;
    Ok(t)
}
