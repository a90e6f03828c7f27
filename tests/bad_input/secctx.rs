//! Security context extensions (`--security-label`) from an untrusted guest: records cut,
//! overrun, duplicated, of unknown types, with random bytes, on every creating opcode and on
//! nodes that are no directory. Every request gets a reply; no fd, staging directory or node is
//! left behind by a refused creation.

use super::common::rng::Rng;
use super::harness::*;

/// The body (without extension) of a creating `opcode` making `name`.
fn body(opcode: u32, name: &str) -> Vec<u8> {
    let mut b = match opcode {
        FUSE_CREATE | FUSE_TMPFILE => create_in().as_slice().to_vec(),
        FUSE_MKNOD => mknod_in().as_slice().to_vec(),
        FUSE_MKDIR => mkdir_in().as_slice().to_vec(),
        _ => Vec::new(),
    };
    b.extend(name.as_bytes());
    b.push(0);
    if opcode == FUSE_SYMLINK {
        b.extend(b"target\0");
    }
    b
}

#[test]
fn malformed_security_contexts() {
    let mut s = Setup::with_args(&["--security-label"]);
    assert_ne!(s.client.flags() & FUSE_SECURITY_CTX, 0);
    let seed = 0x5ecc_7a11_u64 ^ u64::from(std::process::id());
    let mut rng = Rng::new(seed);
    let good = secctx(b"security.selinux", b"system_u:object_r:tmp_t:s0\0");
    let ops = [
        FUSE_CREATE,
        FUSE_MKNOD,
        FUSE_MKDIR,
        FUSE_SYMLINK,
        FUSE_TMPFILE,
    ];
    let parents = [ROOT, s.nodes.dir, s.nodes.file, s.nodes.escape, 0, u64::MAX];
    let mut made = 0;
    for i in 0..600 {
        let opcode = ops[rng.below(ops.len() as u64) as usize];
        let parent = parents[rng.below(parents.len() as u64) as usize];
        let name = format!("n{i}");
        let mut ext = good.clone();
        match rng.below(8) {
            0 => ext.truncate(rng.below(ext.len() as u64) as usize),
            1 => {
                let at = rng.below(ext.len() as u64) as usize;
                ext[at] = rng.next() as u8;
            }
            2 => {
                let at = (rng.below(4) * 4) as usize;
                ext[at..at + 4].copy_from_slice(&(rng.next() as u32).to_le_bytes());
            }
            3 => ext.extend(good.clone()),
            4 => ext = (0..rng.below(64)).map(|_| rng.next() as u8).collect(),
            5 => ext = secctx(b"trusted.overlay.opaque", b"y"),
            _ => {}
        }
        let mut b = body(opcode, &name);
        let extlen = match rng.below(4) {
            0 => 0,
            1 => rng.next() as u16,
            _ => (ext.len() / 8) as u16,
        };
        b.extend(&ext);
        let req = s.client.request_with_ext(opcode, parent, &b, extlen);
        let what = format!("request {i} (seed {seed:#x}): opcode {opcode} parent {parent:#x}");
        if let Reply::Ok(body) = s.send(&req, HDR + 128 + 16, &what) {
            made += 1;
            let e: EntryOut = super::common::fuse_client::from_bytes(&body, "entry");
            if matches!(opcode, FUSE_CREATE | FUSE_TMPFILE) {
                let o: OpenOut = super::common::fuse_client::from_bytes(&body[128..], "open");
                s.client.release(e.nodeid, o.fh, 0).unwrap();
            }
            s.client.forget(e.nodeid, 1);
        }
        if i % 100 == 99 {
            s.assert_serving(&what);
        }
    }
    assert!(
        made > 0,
        "no creation succeeded: the well-formed cases are broken"
    );
    let leftovers: Vec<_> = fs::read_dir(s.share())
        .unwrap()
        .chain(fs::read_dir(s.share().join("dir")).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".vhostfs"))
        .collect();
    assert!(
        leftovers.is_empty(),
        "staging directories left: {leftovers:?}"
    );
    s.finish("malformed security contexts");
}
