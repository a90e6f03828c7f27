//! The options that change what the guest is offered or how files are opened, and where the
//! socket goes: `--no-readdirplus`, `--preserve-noatime`, `--allow-mmap`, `--socket-group`,
//! `--xattrmap`, `--translate-uid`/`--translate-gid`, the migration options KubeVirt passes,
//! `--keep-listening`.

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
fn keep_listening() {
    assert!(!run(&[]).keep_listening);
    assert!(run(&["--keep-listening"]).keep_listening);
}

#[test]
fn writeback() {
    assert!(!run(&[]).writeback);
    for args in [&["--writeback"][..], &["-o", "writeback"]] {
        assert!(run(args).writeback, "{args:?}");
    }
    // The -o form wins over the long option, as every -o form does.
    assert!(!run(&["--writeback", "-o", "no_writeback"]).writeback);
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

#[test]
fn translate_forms() {
    let parse = |specs: &[&str]| Translation::parse(specs.iter().copied()).unwrap();
    assert!(run(&[]).translate.is_identity());
    // Each option is repeatable, in both the `=` and the separate form; with --posix-acl too.
    let config = run(&[
        "--translate-uid=map:0:1000000:65536",
        "--translate-uid",
        "forbid-guest:65536:4294901759",
        "--translate-gid=map:0:1000000:65536",
        "--posix-acl",
    ]);
    assert_eq!(
        config.translate,
        IdMaps {
            uid: parse(&["map:0:1000000:65536", "forbid-guest:65536:4294901759"]),
            gid: parse(&["map:0:1000000:65536"]),
        }
    );
    assert_eq!(config.posix_acl, Negotiation::Always);
    assert_eq!(
        run(&["--translate-uid", "squash-guest:0:1000:4294967295"]).translate,
        IdMaps {
            uid: parse(&["squash-guest:0:1000:4294967295"]),
            gid: Translation::default(),
        }
    );
    for (args, message) in [
        (
            &["--translate-uid=map:0:1000:10", "--translate-uid=host:1005:0:1"][..],
            "invalid value for '--translate-uid': 'host:1005:0:1' overlaps 'map:0:1000:10': both map host ids [1005, 1006)",
        ),
        (
            &["--translate-gid=squash:0:1:1"],
            "invalid value for '--translate-gid': 'squash:0:1:1': unknown type 'squash' (expected map, guest, host, squash-guest, squash-host or forbid-guest)",
        ),
        (
            &["--translate-uid=guest:0:1"],
            "invalid value for '--translate-uid': 'guest:0:1': 'guest' takes 3 numbers, got 2",
        ),
    ] {
        assert_eq!(super::tests::fail(args), message, "{args:?}");
    }
}

#[test]
fn migration_options_make_the_migration_config() {
    use crate::passthrough::migration::{MigrationConfig, MigrationMode, OnError};
    // KubeVirt's options, without a warning.
    let config = run(&[
        "--migration-on-error=guest-error",
        "--migration-mode=find-paths",
    ]);
    assert!(config.deprecations.is_empty(), "{:?}", config.deprecations);
    assert_eq!(
        config.migration,
        MigrationConfig {
            mode: MigrationMode::FindPaths,
            on_error: OnError::GuestError,
            verify_handles: false,
            confirm_paths: false,
        }
    );
    // virtiofsd's defaults.
    assert_eq!(run(&[]).migration, MigrationConfig::default());
    assert_eq!(MigrationConfig::default().mode, MigrationMode::FindPaths);
    assert_eq!(MigrationConfig::default().on_error, OnError::Abort);
    let config = run(&[
        "--migration-mode=file-handles",
        "--migration-on-error=abort",
        "--migration-verify-handles",
        "--migration-confirm-paths",
    ]);
    assert_eq!(
        config.migration,
        MigrationConfig {
            mode: MigrationMode::FileHandles,
            on_error: OnError::Abort,
            verify_handles: true,
            confirm_paths: true,
        }
    );
    assert!(super::tests::fail(&["--migration-mode=paths"])
        .starts_with("invalid value 'paths' for '--migration-mode <MIGRATION_MODE>'"));
    assert!(super::tests::fail(&["--migration-on-error=ignore"])
        .starts_with("invalid value 'ignore' for '--migration-on-error <MIGRATION_ON_ERROR>'"));
}
