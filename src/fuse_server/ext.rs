//! Request extensions: the security context of creating requests (FUSE_SECURITY_CTX).
//!
//! Once FUSE_SECURITY_CTX is negotiated, a Linux guest appends to every CREATE, MKNOD, MKDIR
//! and SYMLINK (and TMPFILE) the security context its LSM chose for the new node. Since 7.38
//! (Linux 6.4) it is a request extension, the last `total_extlen * 8` bytes of the request: a
//! list of `fuse_ext_header { size, type }` records, where types 0..=31 are the
//! `fuse_secctx_header { size, nr_secctx }` of 7.36. A 7.36/7.37 guest sends that header
//! right after the names, with `total_extlen` 0. Either way the bytes are parsed here, with
//! virtiofsd 1.14's rules:
//! - `nr_secctx` 0 (no LSM gave a context): no label; more than one: EINVAL;
//! - one `fuse_secctx { size, padding }`, the xattr name (NUL-terminated), then `size` bytes
//!   of context (the rest of the record is alignment padding); `size` 0: EINVAL;
//! - a second security context record, a supplementary-groups record (FUSE_CREATE_SUPP_GROUP
//!   is not negotiated) or an unknown type: EINVAL; a record that overruns the bytes: EINVAL;
//! - CREATE, MKNOD, MKDIR and SYMLINK without a security context record: EINVAL (a guest that
//!   negotiated the flag always sends one, empty or not).
//!
//! Beyond virtiofsd, the name must be a `security.*` xattr name (an LSM's): the extension is
//! not a way to set other xattrs. Other opcodes' extensions are skipped, as in virtiofsd.

use std::ffi::CStr;
use std::io;

use super::reply::einval;
use crate::passthrough::SecurityLabel;

/// `fuse_ext_header` / `fuse_secctx_header` / `fuse_secctx`: all 8 bytes.
const RECORD_HEADER: usize = 8;
/// Types 0..=FUSE_MAX_NR_SECCTX are security context headers (the type is `nr_secctx`).
const FUSE_MAX_NR_SECCTX: u32 = 31;
/// The largest extension area we copy out of guest memory (an LSM context is a few hundred
/// bytes at most; `total_extlen` could claim 512 KiB).
pub(super) const MAX_EXT_LEN: usize = 64 * 1024;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Parses the extension bytes `ext` of a creating request; `required`: a security context
/// record must be there.
pub(super) fn security_label(ext: &[u8], required: bool) -> io::Result<Option<SecurityLabel>> {
    let mut rest = ext;
    let mut seen = false;
    let mut label = None;
    while !rest.is_empty() {
        if rest.len() < RECORD_HEADER {
            return Err(einval());
        }
        let size = u32_at(rest, 0) as usize;
        let kind = u32_at(rest, 4);
        if size < RECORD_HEADER || size > rest.len() {
            return Err(einval());
        }
        let body = &rest[RECORD_HEADER..size];
        rest = &rest[size..];
        if kind > FUSE_MAX_NR_SECCTX || seen {
            return Err(einval());
        }
        seen = true;
        label = secctx(kind, body)?;
    }
    if required && !seen {
        return Err(einval());
    }
    Ok(label)
}

/// The `nr` contexts of one security context record (`body` follows its header).
fn secctx(nr: u32, body: &[u8]) -> io::Result<Option<SecurityLabel>> {
    match nr {
        0 => return Ok(None),
        1 => {}
        _ => return Err(einval()),
    }
    if body.len() < RECORD_HEADER {
        return Err(einval());
    }
    let size = u32_at(body, 0) as usize;
    if size == 0 {
        return Err(einval());
    }
    let after = &body[RECORD_HEADER..];
    let nul = after.iter().position(|&b| b == 0).ok_or_else(einval)?;
    let name = CStr::from_bytes_with_nul(&after[..=nul]).map_err(|_| einval())?;
    if !name.to_bytes().starts_with(b"security.") || name.to_bytes().len() == 9 {
        return Err(einval());
    }
    let value = after[nul + 1..].get(..size).ok_or_else(einval)?;
    Ok(Some(SecurityLabel {
        name: name.to_owned(),
        value: value.to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A security context record as Linux builds it: header, fuse_secctx, name, value, padded
    /// to 8 bytes.
    fn record(nr: u32, name: &[u8], value: &[u8]) -> Vec<u8> {
        let mut ctx = (value.len() as u32).to_le_bytes().to_vec();
        ctx.extend([0; 4]);
        ctx.extend(name);
        ctx.push(0);
        ctx.extend(value);
        let size = (RECORD_HEADER + ctx.len()).next_multiple_of(8);
        let mut v = (size as u32).to_le_bytes().to_vec();
        v.extend(nr.to_le_bytes());
        v.extend(ctx);
        v.resize(size, 0);
        v
    }

    fn errno(r: io::Result<Option<SecurityLabel>>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    #[test]
    fn one_context() {
        let ext = record(1, b"security.selinux", b"system_u:object_r:tmp_t:s0\0");
        let l = security_label(&ext, true).unwrap().unwrap();
        assert_eq!(l.name.to_bytes(), b"security.selinux");
        assert_eq!(l.value, b"system_u:object_r:tmp_t:s0\0");
    }

    #[test]
    fn empty_header_means_no_label() {
        let ext = [8u8, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(security_label(&ext, true).unwrap(), None);
        assert_eq!(security_label(&[], false).unwrap(), None);
    }

    #[test]
    fn malformed_records_are_einval() {
        let good = record(1, b"security.selinux", b"ctx");
        let einval = Some(libc::EINVAL);
        // Missing where required.
        assert_eq!(errno(security_label(&[], true)), einval);
        // Two contexts in one record, or two records.
        assert_eq!(
            errno(security_label(&record(2, b"security.a", b"x"), true)),
            einval
        );
        assert_eq!(
            errno(security_label(&[good.clone(), good.clone()].concat(), true)),
            einval
        );
        // Supplementary groups (not negotiated) and unknown types.
        for kind in [32u32, 33, u32::MAX] {
            let mut r = good.clone();
            r[4..8].copy_from_slice(&kind.to_le_bytes());
            assert_eq!(errno(security_label(&r, true)), einval, "type {kind}");
        }
        // Sizes: below a header, beyond the bytes, a cut header, a zero context size.
        for size in [0u32, 7, good.len() as u32 + 8, u32::MAX] {
            let mut r = good.clone();
            r[0..4].copy_from_slice(&size.to_le_bytes());
            assert_eq!(errno(security_label(&r, true)), einval, "size {size}");
        }
        assert_eq!(errno(security_label(&good[..5], true)), einval);
        assert_eq!(
            errno(security_label(&record(1, b"security.a", b""), true)),
            einval
        );
        // The context is longer than the record.
        let mut r = good.clone();
        r[8..12].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(errno(security_label(&r, true)), einval);
        // No NUL after the name.
        let mut r = record(1, b"security.selinux", b"");
        r.truncate(8 + 8 + 16);
        let len = r.len() as u32;
        r[0..4].copy_from_slice(&len.to_le_bytes());
        r[8..12].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(errno(security_label(&r, true)), einval);
        // Names outside security.*
        for name in [
            &b"user.x"[..],
            b"trusted.x",
            b"security.",
            b"system.posix_acl_access",
        ] {
            assert_eq!(errno(security_label(&record(1, name, b"v"), true)), einval);
        }
    }
}
