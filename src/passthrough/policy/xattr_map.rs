//! `--xattrmap`: translation of xattr names between the guest (client) and the host (server),
//! with virtiofsd's rule language (its `doc/xattr-mapping.md`).
//!
//! A map is a list of rules `:type:scope:key:prepend:`, where the first non-blank character of a
//! rule is its separator and ends each field; blanks may surround rules. `type` is `prefix`,
//! `ok`, `bad` or `unsupported`; `scope` is `client`, `server` or `all`. A client name (GET,
//! SET, REMOVEXATTR) is matched against `key`, a host name (each name LISTXATTR returns) against
//! `prepend`, both as prefixes (empty matches everything); the first matching rule decides:
//!
//! | type          | client name                  | host name              |
//! |---------------|------------------------------|------------------------|
//! | `prefix`      | `prepend` is put before it   | `prepend` is stripped  |
//! | `ok`          | unchanged                    | unchanged              |
//! | `bad`         | EPERM (GETXATTR: ENODATA)    | hidden                 |
//! | `unsupported` | ENOTSUP                      | hidden                 |
//!
//! `:map:key:prepend:` is shorthand, allowed once and only as the last rule: with an empty key
//! it is `:prefix:all::prepend:` `:bad:all:::`; else `:prefix:all:key:prepend:`
//! `:bad:all:prepend:key:` `:ok:all:::`.
//!
//! The spec requires a rule for every name (a final catch-all), but virtiofsd does not check it
//! at start-up (it aborts when a name matches nothing). Here a client name that matches nothing
//! is refused like `bad`, and a host name that matches nothing is hidden.

use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Prefix,
    Ok,
    Bad,
    Unsupported,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rule {
    kind: Kind,
    client: bool,
    server: bool,
    key: Vec<u8>,
    prepend: Vec<u8>,
}

impl Rule {
    fn all(kind: Kind, key: &[u8], prepend: &[u8]) -> Rule {
        Rule {
            kind,
            client: true,
            server: true,
            key: key.to_vec(),
            prepend: prepend.to_vec(),
        }
    }
}

/// What a client name becomes on the host.
#[derive(Debug, PartialEq, Eq)]
pub enum HostName<'a> {
    Name(Cow<'a, CStr>),
    /// A `bad` rule (or no rule) matched.
    Bad,
    /// An `unsupported` rule matched.
    Unsupported,
}

/// A parsed `--xattrmap`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XattrMap {
    rules: Vec<Rule>,
}

/// Why a `--xattrmap` string is invalid.
#[derive(Debug, PartialEq, Eq)]
pub struct ParseError(String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

/// The fields of one rule after its separator, each ended by the separator.
fn fields<'s>(
    rest: &mut &'s str,
    sep: char,
    n: usize,
    rule: usize,
) -> Result<Vec<&'s str>, ParseError> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let Some(end) = rest.find(sep) else {
            return Err(ParseError(format!(
                "rule {rule}: incomplete rule (each field must end with '{sep}')"
            )));
        };
        out.push(&rest[..end]);
        *rest = &rest[end + sep.len_utf8()..];
    }
    Ok(out)
}

impl FromStr for XattrMap {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<XattrMap, ParseError> {
        let mut rules = Vec::new();
        let mut rest = s;
        let mut number = 0;
        loop {
            rest = rest.trim_start();
            let Some(sep) = rest.chars().next() else {
                break;
            };
            number += 1;
            rest = &rest[sep.len_utf8()..];
            let kind = fields(&mut rest, sep, 1, number)?[0];
            if kind == "map" {
                let f = fields(&mut rest, sep, 2, number)?;
                if !rest.trim().is_empty() {
                    return Err(ParseError(format!(
                        "rule {number}: a 'map' rule must be the last rule"
                    )));
                }
                let (key, prepend) = (f[0].as_bytes(), f[1].as_bytes());
                rules.push(Rule::all(Kind::Prefix, key, prepend));
                if key.is_empty() {
                    rules.push(Rule::all(Kind::Bad, b"", b""));
                } else {
                    rules.push(Rule::all(Kind::Bad, prepend, key));
                    rules.push(Rule::all(Kind::Ok, b"", b""));
                }
                break;
            }
            let kind = match kind {
                "prefix" => Kind::Prefix,
                "ok" => Kind::Ok,
                "bad" => Kind::Bad,
                "unsupported" => Kind::Unsupported,
                _ => {
                    return Err(ParseError(format!(
                        "rule {number}: unknown type '{kind}' (expected prefix, ok, bad, unsupported or map)"
                    )))
                }
            };
            let f = fields(&mut rest, sep, 3, number)?;
            let (client, server) = match f[0] {
                "client" => (true, false),
                "server" => (false, true),
                "all" => (true, true),
                other => {
                    return Err(ParseError(format!(
                        "rule {number}: unknown scope '{other}' (expected client, server or all)"
                    )))
                }
            };
            rules.push(Rule {
                kind,
                client,
                server,
                key: f[1].as_bytes().to_vec(),
                prepend: f[2].as_bytes().to_vec(),
            });
        }
        if rules.is_empty() {
            return Err(ParseError("no rules".into()));
        }
        Ok(XattrMap { rules })
    }
}

impl XattrMap {
    /// The host name for a name the guest sent (GETXATTR, SETXATTR, REMOVEXATTR).
    pub fn to_host<'a>(&self, name: &'a CStr) -> HostName<'a> {
        let bytes = name.to_bytes();
        let Some(rule) = self
            .rules
            .iter()
            .find(|r| r.client && bytes.starts_with(&r.key))
        else {
            return HostName::Bad;
        };
        match rule.kind {
            Kind::Ok => HostName::Name(Cow::Borrowed(name)),
            Kind::Bad => HostName::Bad,
            Kind::Unsupported => HostName::Unsupported,
            Kind::Prefix => {
                let mut v = rule.prepend.clone();
                v.extend_from_slice(bytes);
                // Neither part has a NUL: both come from C strings.
                HostName::Name(Cow::Owned(CString::new(v).expect("no NUL in xattr names")))
            }
        }
    }

    /// The name the guest sees for a host name, `None` when it is hidden.
    pub fn to_guest<'a>(&self, name: &'a [u8]) -> Option<&'a [u8]> {
        let rule = self
            .rules
            .iter()
            .find(|r| r.server && name.starts_with(&r.prepend))?;
        match rule.kind {
            Kind::Ok => Some(name),
            Kind::Bad | Kind::Unsupported => None,
            // Stripping may leave an empty name (the host name was the prefix itself): hidden.
            Kind::Prefix => Some(&name[rule.prepend.len()..]).filter(|n| !n.is_empty()),
        }
    }

    /// A host LISTXATTR answer (NUL-terminated names) as the guest sees it.
    pub fn list_to_guest(&self, host: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(host.len());
        for name in host.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            if let Some(g) = self.to_guest(name) {
                out.extend_from_slice(g);
                out.push(0);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
