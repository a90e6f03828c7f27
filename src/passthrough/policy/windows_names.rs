//! `--windows-names`: host names that Windows cannot hold, presented to the guest as the
//! private-use characters WinFsp and Samba (`catia`, `fruit:encoding = private`) use, and
//! mapped back.
//!
//! Windows refuses `\ : * ? " < > |`, the control characters 1–31, and a trailing dot or
//! space in a name. The virtio-win service lists host names as they are, so a host file named
//! `a:b` shows in Explorer but cannot be opened. With this policy each such character `c` of a
//! host name goes to the guest as U+F000 + `c` (UTF-8 `EF 80 xx` / `EF 81 xx`), in READDIR and
//! READDIRPLUS entries and in READLINK targets (component by component); WinFsp shows U+F03A as
//! `:` and turns it back into `:` on the way to the service. Names coming from the guest are
//! mapped back: U+F000 + `c` for such a `c` becomes `c` (a `.` or space only in the trailing
//! run, where the host form puts them), and a raw `c` is taken as it is.
//!
//! Invariants: a name needing no mapping is passed through byte for byte, borrowed (no copy,
//! one scan); `to_host(to_guest(n)) == n` for every host name `n` (tests below); a host name
//! that itself contains U+F000 + `c` (made by a Samba or WinFsp client of the same directory)
//! cannot be told apart from the mapped form: the guest reaches the plain-character name
//! instead. `.` and `..` are never mapped.

use std::borrow::Cow;
use std::ffi::{CStr, CString};

/// Characters Windows cannot hold anywhere in a name.
fn reserved(c: u8) -> bool {
    matches!(
        c,
        b'\\' | b':' | b'*' | b'?' | b'"' | b'<' | b'>' | b'|' | 1..=31
    )
}

/// Characters Windows cannot hold at the end of a name.
fn trailing(c: u8) -> bool {
    matches!(c, b'.' | b' ')
}

/// U+F000 + `c` in UTF-8 (`c` < 0x80).
fn private(c: u8) -> [u8; 3] {
    [0xEF, 0x80 | (c >> 6), 0x80 | (c & 0x3F)]
}

/// The character `c` that the UTF-8 sequence at the start of `b` stands for, if it is
/// U+F000 + `c` with `c` < 0x80.
fn unprivate(b: &[u8]) -> Option<u8> {
    match b {
        [0xEF, hi @ (0x80 | 0x81), lo, ..] if lo & 0xC0 == 0x80 => {
            Some(((hi & 1) << 6) | (lo & 0x3F))
        }
        _ => None,
    }
}

/// Where the run of trailing dots and spaces of `name` starts (`name.len()` if none).
fn trailing_start(name: &[u8]) -> usize {
    name.len() - name.iter().rev().take_while(|&&c| trailing(c)).count()
}

/// A host name as the guest sees it.
pub fn to_guest(name: &[u8]) -> Cow<'_, [u8]> {
    if name == b"." || name == b".." {
        return Cow::Borrowed(name);
    }
    let tail = trailing_start(name);
    if tail == name.len() && !name.iter().any(|&c| reserved(c)) {
        return Cow::Borrowed(name);
    }
    let mut out = Vec::with_capacity(name.len() + 8);
    for (i, &c) in name.iter().enumerate() {
        if reserved(c) || i >= tail {
            out.extend_from_slice(&private(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A symlink target as the guest sees it: each `/`-separated component by [`to_guest`].
pub fn target_to_guest(target: &[u8]) -> Cow<'_, [u8]> {
    if !target
        .split(|&c| c == b'/')
        .any(|part| matches!(to_guest(part), Cow::Owned(_)))
    {
        return Cow::Borrowed(target);
    }
    let parts: Vec<Cow<[u8]>> = target.split(|&c| c == b'/').map(to_guest).collect();
    Cow::Owned(parts.join(&b'/'))
}

/// A name from the guest as the host has it (bytes, no NUL).
fn bytes_to_host(name: &[u8]) -> Cow<'_, [u8]> {
    if !name
        .windows(2)
        .any(|w| w == [0xEF, 0x80] || w == [0xEF, 0x81])
    {
        return Cow::Borrowed(name);
    }
    // First pass: where the mapped form's trailing run of dots and spaces starts.
    let mut chars = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        match unprivate(&name[i..]) {
            Some(c) if reserved(c) || trailing(c) => {
                chars.push((c, true));
                i += 3;
            }
            _ => {
                chars.push((name[i], false));
                i += 1;
            }
        }
    }
    let tail = chars.len()
        - chars
            .iter()
            .rev()
            .take_while(|&&(c, mapped)| mapped && trailing(c))
            .count();
    let mut out = Vec::with_capacity(name.len());
    for (i, &(c, mapped)) in chars.iter().enumerate() {
        if mapped && trailing(c) && i < tail {
            // A private dot or space inside the name: not one of ours, kept as it came.
            out.extend_from_slice(&private(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A name from the guest as the host has it.
pub fn to_host(name: &CStr) -> Cow<'_, CStr> {
    match bytes_to_host(name.to_bytes()) {
        Cow::Borrowed(_) => Cow::Borrowed(name),
        Cow::Owned(b) => Cow::Owned(CString::new(b).expect("no NUL is produced")),
    }
}

/// A symlink target from the guest as the host has it: each component by [`to_host`].
pub fn target_to_host(target: &CStr) -> Cow<'_, CStr> {
    let bytes = target.to_bytes();
    if !bytes
        .windows(2)
        .any(|w| w == [0xEF, 0x80] || w == [0xEF, 0x81])
    {
        return Cow::Borrowed(target);
    }
    let parts: Vec<Cow<[u8]>> = bytes.split(|&c| c == b'/').map(bytes_to_host).collect();
    Cow::Owned(CString::new(parts.join(&b'/')).expect("no NUL is produced"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &str) -> String {
        String::from_utf8(to_guest(s.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn reserved_characters_and_trailing_dots_and_spaces() {
        for c in "\\:*?\"<>|".chars() {
            let want = format!("a{}b", char::from_u32(0xF000 + c as u32).unwrap());
            assert_eq!(g(&format!("a{c}b")), want, "{c}");
        }
        assert_eq!(g("a\u{1}b"), "a\u{F001}b");
        assert_eq!(g("a\u{1f}"), "a\u{F01F}");
        assert_eq!(g("name."), "name\u{F02E}");
        assert_eq!(g("name. ."), "name\u{F02E}\u{F020}\u{F02E}");
        assert_eq!(g("a.b c"), "a.b c");
    }

    #[test]
    fn names_that_are_fine_stay_byte_identical_and_borrowed() {
        for n in [
            "plain.txt",
            ".hidden",
            "..x",
            "a b",
            "ünïcødé",
            "日本語",
            ".",
            "..",
            "\u{F03A}",
        ] {
            assert!(matches!(to_guest(n.as_bytes()), Cow::Borrowed(_)), "{n}");
            let c = CString::new(n).unwrap();
            if !n.contains('\u{F03A}') {
                assert!(matches!(to_host(&c), Cow::Borrowed(_)), "{n}");
            }
        }
    }

    #[test]
    fn every_mapped_name_comes_back() {
        let names = [
            "a:b",
            "a\\b",
            "x*?\"<>|y",
            "end.",
            "end ",
            "end. .",
            "\u{1}ctl",
            "a:b.",
            "ü:ß.",
            "..x:",
            "a.b",
        ];
        for n in names {
            let guest = to_guest(n.as_bytes()).into_owned();
            let back = to_host(&CString::new(guest.clone()).unwrap()).into_owned();
            assert_eq!(back.to_bytes(), n.as_bytes(), "{n} via {guest:?}");
        }
        // The raw character from the guest is taken as it is (WinFsp sends it raw).
        assert_eq!(to_host(c"a:b").to_bytes(), b"a:b");
        // A private dot inside a name is not ours: kept.
        assert_eq!(
            to_host(&CString::new("a\u{F02E}b").unwrap()).to_bytes(),
            "a\u{F02E}b".as_bytes()
        );
    }

    #[test]
    fn symlink_targets_component_by_component() {
        assert_eq!(
            &*target_to_guest(b"../dir./a:b"),
            "../dir\u{F02E}/a\u{F03A}b".as_bytes()
        );
        assert_eq!(&*target_to_guest(b"/abs/plain"), b"/abs/plain");
        let t = CString::new("../dir\u{F02E}/a\u{F03A}b").unwrap();
        assert_eq!(target_to_host(&t).to_bytes(), b"../dir./a:b");
    }
}
