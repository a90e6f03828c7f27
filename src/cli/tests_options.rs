//! The options that change what the guest is offered or how files are opened, and where the
//! socket goes: `--no-readdirplus`, `--preserve-noatime`, `--allow-mmap`, `--socket-group`,
//! `--xattrmap`.

use super::tests::run;
use super::*;

#[test]
fn readdirplus_forms() {
    assert!(run(&[]).readdirplus);
    for args in [
        &["--no-readdirplus"][..],
        &["-o", "no_readdirplus"],
        &["-o", "readdirplus,no_readdirplus"],
        // As in virtiofsd: no READDIRPLUS with --cache=never, whatever else is given.
        &["--cache=never"],
        &["-o", "cache=none"],
        &["--cache=never", "-o", "readdirplus"],
    ] {
        assert!(!run(args).readdirplus, "{args:?}");
    }
    for args in [
        &["-o", "readdirplus"][..],
        // -o items apply after the long options, as in virtiofsd.
        &["--no-readdirplus", "-o", "readdirplus"],
        &["--cache=metadata"],
        &["--cache=always"],
        &["--cache=never", "-o", "cache=auto"],
    ] {
        assert!(run(args).readdirplus, "{args:?}");
    }
}

#[test]
fn preserve_noatime() {
    assert!(!run(&[]).preserve_noatime);
    assert!(run(&["--preserve-noatime"]).preserve_noatime);
}

#[test]
fn allow_mmap() {
    assert!(!run(&[]).allow_mmap);
    let config = run(&["--cache=never", "--allow-mmap"]);
    assert!(config.allow_mmap);
    assert_eq!(config.cache, CacheMode::Never);
    // As in virtiofsd, it does not depend on the cache mode (it only matters for direct I/O).
    assert!(run(&["--allow-mmap"]).allow_mmap);
}

#[test]
fn socket_group() {
    assert_eq!(run(&[]).socket_group, None);
    // Not looked up here (the daemon does, at start-up): any name parses.
    assert_eq!(
        run(&["--socket-group=kvm"]).socket_group.as_deref(),
        Some("kvm")
    );
    let parse = |args: &[&str]| {
        let mut all = vec!["vhostfs", "--shared-dir=/srv"];
        all.extend_from_slice(args);
        parse_args(all.into_iter().map(OsString::from))
    };
    let err = parse(&["--socket-group=kvm"]).unwrap_err();
    assert_eq!(
        err.message(),
        "--socket-group needs --socket-path: a socket-activated socket is created by systemd \
         (set SocketGroup= and SocketMode= in the .socket unit)"
    );
    // As in virtiofsd: --fd has no socket to give a group to.
    let err = parse(&["--fd=0", "--socket-group=kvm"]).unwrap_err();
    assert!(err.message().contains("cannot be used with"), "{err}");
    assert!(err.message().contains("--socket-group"), "{err}");
}

#[test]
fn xattrmap_forms() {
    let docker = ":prefix:all::user.docker.desktop.::bad:all:::";
    for args in [
        &["--xattrmap", docker][..],
        &[
            "-o",
            "xattrmap=:prefix:all::user.docker.desktop.::bad:all:::",
        ],
        // The -o form applies after the long option, as every -o form does.
        &[
            "--xattrmap=:ok:all:::",
            "-o",
            "xattrmap=:map::user.docker.desktop.:",
        ],
    ] {
        let config = run(args);
        // --xattrmap implies --xattr, as in virtiofsd.
        assert!(config.xattr, "{args:?}");
        assert_eq!(config.xattrmap, Some(docker.parse().unwrap()), "{args:?}");
    }
    assert!(run(&["--xattrmap=:ok:all:::", "-o", "no_xattr"]).xattr);
    assert_eq!(run(&["--xattr"]).xattrmap, None);
    assert_eq!(
        super::tests::fail(&["--xattrmap=:prefix:client:hi"]),
        "invalid value for '--xattrmap': rule 1: incomplete rule (each field must end with ':')"
    );
    assert_eq!(
        super::tests::fail(&["-o", "xattrmap=/bad/everywhere///"]),
        "invalid value for '-o xattrmap': rule 1: unknown scope 'everywhere' (expected client, server or all)"
    );
    assert_eq!(
        super::tests::fail(&["--xattrmap= "]),
        "invalid value for '--xattrmap': no rules"
    );
}
