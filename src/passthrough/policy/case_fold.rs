//! `--case-insensitive`: when two names are the same name.
//!
//! Two names are the same when their folded forms are equal byte for byte. The fold is simple
//! (one character to one character) Unicode case folding, as Windows compares names (its
//! upcase table) and as NTFS and Samba do: each character is taken to upper case and back to
//! lower case when each step gives a single character (so `ß`, whose upper case is `SS`, stays
//! `ß`; `ς` and `σ` both fold to `σ`; the Kelvin sign to `k`), else kept; this is CaseFolding.txt's
//! C + S mappings for every character but the dotless `ı`, which is kept as Unicode keeps it. Not ASCII only, as
//! crosvm's `ascii_casefold` is. No normalisation: `é` precomposed and `e` + U+0301 differ,
//! as on NTFS. A name that is not UTF-8 folds its ASCII letters only.
//!
//! Invariant: an ASCII name is folded without decoding (the common case), and a name that is
//! already folded is returned borrowed.

use std::borrow::Cow;

fn single(mut it: impl Iterator<Item = char>) -> Option<char> {
    let c = it.next()?;
    it.next().is_none().then_some(c)
}

/// One character's simple fold.
pub fn fold_char(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    // The dotless i upper-cases to I, but Unicode leaves it unfolded (Turkish: `I` and `ı`
    // are one letter, `i` and `İ` another).
    if c == '\u{131}' {
        return c;
    }
    let up = single(c.to_uppercase()).unwrap_or(c);
    single(up.to_lowercase()).unwrap_or(up)
}

/// The folded form of a name.
pub fn fold(name: &[u8]) -> Cow<'_, [u8]> {
    if name.is_ascii() || std::str::from_utf8(name).is_err() {
        if !name.iter().any(u8::is_ascii_uppercase) {
            return Cow::Borrowed(name);
        }
        return Cow::Owned(name.to_ascii_lowercase());
    }
    let s = std::str::from_utf8(name).expect("checked above");
    if s.chars().all(|c| fold_char(c) == c) {
        return Cow::Borrowed(name);
    }
    Cow::Owned(s.chars().map(fold_char).collect::<String>().into_bytes())
}

/// Whether `name` folds to `folded` (a [`fold`] result), without building its folded form.
pub fn folds_to(name: &[u8], folded: &[u8]) -> bool {
    match std::str::from_utf8(name) {
        Ok(s) if !name.is_ascii() => {
            let Ok(f) = std::str::from_utf8(folded) else {
                return false;
            };
            s.chars().map(fold_char).eq(f.chars())
        }
        _ => {
            name.len() == folded.len()
                && name
                    .iter()
                    .zip(folded)
                    .all(|(a, b)| a.to_ascii_lowercase() == *b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &[u8], b: &[u8]) -> bool {
        let same = fold(a) == fold(b);
        assert_eq!(folds_to(a, &fold(b)), same, "{a:?} {b:?}");
        assert_eq!(folds_to(b, &fold(a)), same, "{a:?} {b:?}");
        same
    }

    #[test]
    fn unicode_simple_folding() {
        for (a, b) in [
            ("Foo.TXT", "foo.txt"),
            ("ÄÖÜ", "äöü"),
            ("ΣΊΣΥΦΟΣ", "σίσυφος"),
            ("ς", "σ"),
            ("\u{212A}elvin", "kelvin"),
            ("ПРИВЕТ", "привет"),
            ("Ǆ", "ǆ"),
        ] {
            assert!(same(a.as_bytes(), b.as_bytes()), "{a} {b}");
        }
        for (a, b) in [("ß", "ss"), ("é", "e\u{301}"), ("a", "b"), ("ı", "i")] {
            assert!(!same(a.as_bytes(), b.as_bytes()), "{a} {b}");
        }
    }

    #[test]
    fn folded_names_are_borrowed() {
        for n in ["foo.txt", "日本語", "привет", "ß"] {
            assert!(matches!(fold(n.as_bytes()), Cow::Borrowed(_)), "{n}");
        }
        // Not UTF-8: ASCII letters only.
        assert_eq!(&*fold(b"AB\xff"), b"ab\xff");
    }
}
