//! The parser and the matching, on the examples of virtiofsd's doc/xattr-mapping.md.

use super::*;

fn map(s: &str) -> XattrMap {
    s.parse().unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn host(m: &XattrMap, name: &str) -> HostName<'static> {
    let c = CString::new(name).unwrap();
    match m.to_host(&c) {
        HostName::Name(n) => HostName::Name(Cow::Owned(n.into_owned())),
        HostName::Bad => HostName::Bad,
        HostName::Unsupported => HostName::Unsupported,
    }
}

fn named(s: &str) -> HostName<'static> {
    HostName::Name(Cow::Owned(CString::new(s).unwrap()))
}

fn guest(m: &XattrMap, list: &[&str]) -> Vec<String> {
    let mut raw = Vec::new();
    for n in list {
        raw.extend_from_slice(n.as_bytes());
        raw.push(0);
    }
    let out = m.list_to_guest(&raw);
    assert!(out.is_empty() || out.ends_with(&[0]));
    out.split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8(n.to_vec()).unwrap())
        .collect()
}

fn err(s: &str) -> String {
    s.parse::<XattrMap>().unwrap_err().to_string()
}

#[test]
fn table_rules() {
    let m = map(":prefix:client:trusted.:user.virtiofs.:");
    assert_eq!(host(&m, "trusted.a"), named("user.virtiofs.trusted.a"));
    // Client scope only: host names match nothing and are hidden.
    assert_eq!(
        guest(&m, &["user.virtiofs.trusted.a"]),
        Vec::<String>::new()
    );

    let m = map(":prefix:server::user.virtiofs.:");
    assert_eq!(guest(&m, &["user.virtiofs.x", "user.y"]), ["x"]);
    assert_eq!(host(&m, "user.x"), HostName::Bad);

    let m = map(":prefix:all:trusted.:user.virtiofs.:");
    assert_eq!(host(&m, "trusted.a"), named("user.virtiofs.trusted.a"));
    assert_eq!(guest(&m, &["user.virtiofs.trusted.a"]), ["trusted.a"]);

    let m = map(":ok:client:user.::");
    assert_eq!(host(&m, "user.a"), named("user.a"));
    assert_eq!(host(&m, "trusted.a"), HostName::Bad);

    let m = map(":ok:server::security.:");
    assert_eq!(
        guest(&m, &["security.selinux", "user.a"]),
        ["security.selinux"]
    );

    let m = map(":ok:all:::");
    assert_eq!(host(&m, "security.x"), named("security.x"));
    assert_eq!(guest(&m, &["a.b", "c.d"]), ["a.b", "c.d"]);

    let m = map(":bad:server::security.::ok:all:::");
    assert_eq!(guest(&m, &["security.selinux", "user.a"]), ["user.a"]);
    assert_eq!(host(&m, "security.selinux"), named("security.selinux"));
}

#[test]
fn example_1_prefix_everything() {
    for s in [
        ":prefix:all::user.virtiofs.::bad:all:::",
        ":map::user.virtiofs.:",
    ] {
        let m = map(s);
        assert_eq!(
            host(&m, "security.selinux"),
            named("user.virtiofs.security.selinux")
        );
        assert_eq!(
            host(&m, "user.virtiofs.x"),
            named("user.virtiofs.user.virtiofs.x")
        );
        assert_eq!(
            guest(
                &m,
                &[
                    "user.virtiofs.security.selinux",
                    "user.host",
                    "security.host"
                ]
            ),
            ["security.selinux"]
        );
    }
    assert_eq!(
        map(":prefix:all::user.virtiofs.::bad:all:::"),
        map(":map::user.virtiofs.:")
    );
}

#[test]
fn example_2_prefix_trusted() {
    let long = "/prefix/all/trusted./user.virtiofs./
                /bad/server//trusted./
                /bad/client/user.virtiofs.//
                /ok/all///";
    for s in [long, "/map/trusted./user.virtiofs./"] {
        let m = map(s);
        assert_eq!(
            host(&m, "trusted.overlay.x"),
            named("user.virtiofs.trusted.overlay.x")
        );
        assert_eq!(host(&m, "user.virtiofs.trusted.x"), HostName::Bad);
        assert_eq!(host(&m, "user.other"), named("user.other"));
        assert_eq!(host(&m, "security.selinux"), named("security.selinux"));
        assert_eq!(
            guest(
                &m,
                &[
                    "user.virtiofs.trusted.a",
                    "trusted.host",
                    "user.b",
                    "security.c"
                ]
            ),
            ["trusted.a", "user.b", "security.c"]
        );
    }
}

#[test]
fn example_3_hide_security() {
    let m = map("/bad/all/security./security./\n/ok/all///");
    assert_eq!(host(&m, "security.selinux"), HostName::Bad);
    assert_eq!(host(&m, "user.a"), named("user.a"));
    assert_eq!(guest(&m, &["security.selinux", "user.a"]), ["user.a"]);
}

#[test]
fn unsupported_rule() {
    let m = map("/unsupported/all/security.selinux/security.selinux//ok/all///");
    assert_eq!(host(&m, "security.selinux"), HostName::Unsupported);
    assert_eq!(host(&m, "security.ima"), named("security.ima"));
    assert_eq!(guest(&m, &["security.selinux", "user.a"]), ["user.a"]);
}

#[test]
fn docker_desktop() {
    let m = map(":prefix:all::user.docker.desktop.::bad:all:::");
    assert_eq!(host(&m, "user.foo"), named("user.docker.desktop.user.foo"));
    assert_eq!(
        guest(
            &m,
            &[
                "user.docker.desktop.user.foo",
                "user.foo",
                "security.selinux"
            ]
        ),
        ["user.foo"]
    );
    // A host name equal to the prefix would map to the empty name: hidden.
    assert_eq!(guest(&m, &["user.docker.desktop."]), Vec::<String>::new());
}

#[test]
fn first_match_wins_and_separators_vary() {
    let m = map("  :ok:all:user.a:user.a: |prefix|all||p.|\t");
    assert_eq!(host(&m, "user.ab"), named("user.ab"));
    assert_eq!(host(&m, "user.b"), named("p.user.b"));
    assert_eq!(guest(&m, &["user.a1", "p.x", "q"]), ["user.a1", "x"]);
    // Multi-byte separators work too.
    let m = map("§ok§all§§§");
    assert_eq!(host(&m, "x"), named("x"));
}

#[test]
fn bad_syntax() {
    assert_eq!(err(""), "no rules");
    assert_eq!(err("  \n "), "no rules");
    assert_eq!(
        err(":prefix:client:hi"),
        "rule 1: incomplete rule (each field must end with ':')"
    );
    assert_eq!(
        err(":ok:all:::/ok/all//"),
        "rule 2: incomplete rule (each field must end with '/')"
    );
    assert_eq!(
        err(":TOMATO:all:::"),
        "rule 1: unknown type 'TOMATO' (expected prefix, ok, bad, unsupported or map)"
    );
    assert_eq!(
        err("/prefix/helloworld///"),
        "rule 1: unknown scope 'helloworld' (expected client, server or all)"
    );
    assert_eq!(
        err(":map:trusted.:virtiofs.user.::map:trusted.:virtiofs.user.:"),
        "rule 1: a 'map' rule must be the last rule"
    );
    assert_eq!(
        err(":map::p.::ok:all:::"),
        "rule 1: a 'map' rule must be the last rule"
    );
    // The map rule has no scope field.
    assert!(err(":map:all::p.:").contains("must be the last rule"));
    assert!(":ok:all::: :map::p.:  ".parse::<XattrMap>().is_ok());
}
