//! Unit tests of the command line.

use super::*;
use crate::temp_dir::TempDir;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixListener;

/// Parses `args` (without the program name).
pub(super) fn parse(args: &[&str]) -> Result<Action, CliError> {
    parse_args(
        std::iter::once("/usr/libexec/virtiofsd")
            .chain(args.iter().copied())
            .map(OsString::from),
    )
}

/// Parses `args` after `--socket-path /tmp/vm.sock --shared-dir /srv` and expects a Config.
pub(super) fn run(args: &[&str]) -> Config {
    let mut all = vec!["--socket-path", "/tmp/vm.sock", "--shared-dir", "/srv"];
    all.extend_from_slice(args);
    match parse(&all) {
        Ok(Action::Run(config)) => *config,
        other => panic!("{args:?}: expected Run, got {other:?}"),
    }
}

/// Parses `args` after a socket and shared dir and expects an error; returns its message.
pub(super) fn fail(args: &[&str]) -> String {
    let mut all = vec!["--socket-path", "/tmp/vm.sock", "--shared-dir", "/srv"];
    all.extend_from_slice(args);
    match parse(&all) {
        Err(e) => {
            assert!(!e.message().contains('\n'), "multi-line error: {e:?}");
            e.message().to_string()
        }
        other => panic!("{args:?}: expected an error, got {other:?}"),
    }
}

#[test]
fn defaults_match_virtiofsd() {
    let config = run(&[]);
    assert_eq!(
        config,
        Config {
            socket: SocketSource::Path("/tmp/vm.sock".into()),
            socket_group: None,
            shared_dir: "/srv".into(),
            inode_file_handles: InodeFileHandles::Prefer,
            cache: CacheMode::Auto,
            thread_pool_size: default_thread_pool_size(),
            rlimit_nofile: None,
            fd_cache_size: 16_384,
            readonly: false,
            xattr: false,
            xattrmap: None,
            posix_acl: Negotiation::Never,
            translate: Default::default(),
            security_label: Negotiation::Never,
            allow_direct_io: false,
            readdirplus: true,
            allow_mmap: false,
            writeback: false,
            migration: Default::default(),
            preserve_noatime: false,
            windows_names: false,
            case_insensitive: false,
            killpriv_v2: false,
            announce_submounts: true,
            log_level: log::LevelFilter::Info,
            syslog: false,
            sandbox: SandboxMode::Namespace,
            seccomp: SeccompMode::Kill,
            modcaps: ModCaps::default(),
            uid_map: vec![],
            gid_map: vec![],
            landlock: LandlockMode::Auto,
            tag: None,
            metrics: None,
            keep_listening: false,
            deprecations: vec![],
        }
    );
}

#[test]
fn seccomp_modes() {
    for (value, mode) in [
        ("kill", SeccompMode::Kill),
        ("log", SeccompMode::Log),
        ("trap", SeccompMode::Trap),
        ("none", SeccompMode::None),
    ] {
        assert_eq!(run(&[&format!("--seccomp={value}")]).seccomp, mode);
    }
}

#[test]
fn modcaps_and_landlock() {
    use caps::Capability::{CAP_CHOWN, CAP_SYS_ADMIN};
    let c = run(&["--modcaps=+sys_admin:-chown", "--landlock=off"]);
    assert_eq!(
        (c.modcaps.add, c.modcaps.remove),
        (vec![CAP_SYS_ADMIN], vec![CAP_CHOWN])
    );
    assert_eq!(c.landlock, LandlockMode::Off);
    let c = run(&["-o", "modcaps=-chown", "--landlock=on"]);
    assert_eq!(c.modcaps.remove, [CAP_CHOWN]);
    assert_eq!(c.landlock, LandlockMode::On);
    assert_eq!(
        fail(&["--modcaps=chown"]),
        "invalid value 'chown' for '--modcaps <MODCAPS>': invalid modcaps item 'chown': expected +NAME or -NAME"
    );
    assert_eq!(
        fail(&["-o", "modcaps=+flying"]),
        "invalid compat value '+flying' for '-o modcaps': unknown capability 'flying'"
    );
}

#[test]
fn sandbox_modes() {
    for (args, mode) in [
        (&["--sandbox=namespace"][..], SandboxMode::Namespace),
        (&["--sandbox", "chroot"], SandboxMode::Chroot),
        (&["--sandbox=NONE"], SandboxMode::None),
        (&["-o", "sandbox=chroot"], SandboxMode::Chroot),
        (
            &["--sandbox=none", "-o", "sandbox=namespace"],
            SandboxMode::Namespace,
        ),
    ] {
        assert_eq!(run(args).sandbox, mode, "{args:?}");
    }
}

#[test]
fn supported_options() {
    let config = run(&[
        "--inode-file-handles=mandatory",
        "--cache",
        "never",
        "--thread-pool-size=16",
        "--rlimit-nofile",
        "4096",
        "--readonly",
        "--xattr",
        "--no-announce-submounts",
        "--log-level=debug",
        "--syslog",
        "--tag=myfs",
    ]);
    assert_eq!(config.inode_file_handles, InodeFileHandles::Mandatory);
    assert_eq!(config.cache, CacheMode::Never);
    assert_eq!(config.thread_pool_size, 16);
    assert_eq!(config.rlimit_nofile, Some(4096));
    assert!(config.readonly && config.xattr && config.syslog);
    assert!(!config.announce_submounts);
    assert_eq!(config.log_level, log::LevelFilter::Debug);
    assert_eq!(config.tag.as_deref(), Some("myfs"));
    assert!(config.deprecations.is_empty());
}

#[test]
fn last_occurrence_wins() {
    assert_eq!(
        run(&["--cache=never", "--cache=always"]).cache,
        CacheMode::Always
    );
    assert!(run(&["--no-announce-submounts", "--announce-submounts"]).announce_submounts);
    assert!(!run(&["--announce-submounts", "--no-announce-submounts"]).announce_submounts);
    assert!(run(&["--xattr", "--xattr"]).xattr);
    let config = run(&["--socket-path=/a", "--shared-dir=/b"]);
    assert_eq!(config.socket, SocketSource::Path("/a".into()));
    assert_eq!(config.shared_dir, PathBuf::from("/b"));
}

#[test]
fn cache_modes() {
    assert_eq!(run(&["--cache=metadata"]).cache, CacheMode::Metadata);
    assert_eq!(run(&["--cache=ALWAYS"]).cache, CacheMode::Always);
}

#[test]
fn deprecated_aliases() {
    let config = run(&["--inode-file-handles=fallback"]);
    assert_eq!(config.inode_file_handles, InodeFileHandles::Prefer);
    assert_eq!(config.deprecations.len(), 1);
    assert!(config.deprecations[0].contains("'fallback'"));
    assert_eq!(
        run(&["--inode-file-handles=never"]).inode_file_handles,
        InodeFileHandles::Never
    );

    let Ok(Action::Run(config)) = parse(&["--socket=/tmp/old.sock", "--shared-dir=/srv"]) else {
        panic!("--socket not accepted");
    };
    assert_eq!(config.socket, SocketSource::Path("/tmp/old.sock".into()));
    assert!(config.deprecations[0].contains("'--socket'"));
    // --socket-path wins over --socket, as in virtiofsd.
    let config = run(&["--socket=/tmp/old.sock"]);
    assert_eq!(config.socket, SocketSource::Path("/tmp/vm.sock".into()));

    let config = run(&["-f", "-d"]);
    assert_eq!(config.log_level, log::LevelFilter::Debug);
    assert_eq!(config.deprecations.len(), 2);
    // -d beats --log-level, as in virtiofsd.
    assert_eq!(
        run(&["-d", "--log-level=error"]).log_level,
        log::LevelFilter::Debug
    );
}

#[test]
fn compat_o_forms() {
    let Ok(Action::Run(config)) =
        parse(&["--socket-path=/s", "-o", "source=/data,cache=none,xattr"])
    else {
        panic!("-o source not accepted");
    };
    assert_eq!(config.shared_dir, PathBuf::from("/data"));
    assert_eq!(config.cache, CacheMode::Never);
    assert!(config.xattr);
    assert!(config.deprecations.iter().any(|d| d.contains("'-o'")));

    // -o applies after the long options, items apply left to right, -o may repeat.
    let config = run(&[
        "-o",
        "xattr,no_xattr",
        "--xattr",
        "-o",
        "cache=always",
        "--cache=never",
    ]);
    assert!(!config.xattr);
    assert_eq!(config.cache, CacheMode::Always);
    assert_eq!(run(&["-ocache=metadata"]).cache, CacheMode::Metadata);
    assert_eq!(run(&["-o", "cache=auto"]).cache, CacheMode::Auto);
    assert_eq!(
        run(&["-o", "source=/other"]).shared_dir,
        PathBuf::from("/other")
    );
    for (value, level) in [
        ("debug", log::LevelFilter::Debug),
        ("info", log::LevelFilter::Info),
        ("warn", log::LevelFilter::Warn),
        ("err", log::LevelFilter::Error),
    ] {
        assert_eq!(run(&["-o", &format!("loglevel={value}")]).log_level, level);
    }
    // Forms equal to what vhostfs does are accepted.
    let config = run(&[
        "-o",
        "no_flock,no_posix_lock,readdirplus,no_writeback,no_allow_direct_io,announce_submounts",
        "-o",
        "no_killpriv_v2,no_posix_acl,no_security_label",
    ]);
    assert!(config.announce_submounts);
    // A later -o can undo an unsupported long option, as in virtiofsd.
    run(&["--killpriv-v2", "-o", "no_killpriv_v2"]);
}

#[test]
fn killpriv_v2_forms() {
    for (args, on) in [
        (&[][..], false),
        (&["--killpriv-v2"], true),
        (&["--no-killpriv-v2"], false),
        (&["--no-killpriv-v2", "--killpriv-v2"], true),
        (&["--killpriv-v2", "--no-killpriv-v2"], false),
        (&["-o", "killpriv_v2"], true),
        (&["-o", "no_killpriv_v2"], false),
        (&["--killpriv-v2", "-o", "no_killpriv_v2"], false),
        (&["-o", "no_killpriv_v2,killpriv_v2"], true),
    ] {
        assert_eq!(run(args).killpriv_v2, on, "{args:?}");
    }
}

#[test]
fn posix_acl_and_direct_io() {
    for (args, mode) in [
        (&["--posix-acl"][..], Negotiation::Always),
        (&["--posix-acl=always"], Negotiation::Always),
        (&["--posix-acl=auto"], Negotiation::Auto),
        (&["--posix-acl=never"], Negotiation::Never),
        (&["-o", "posix_acl"], Negotiation::Always),
        (&["--posix-acl", "-o", "no_posix_acl"], Negotiation::Never),
        (
            &["--posix-acl", "-o", "no_posix_acl,posix_acl"],
            Negotiation::Always,
        ),
    ] {
        let config = run(args);
        assert_eq!(config.posix_acl, mode, "{args:?}");
        // ACLs imply --xattr, as in virtiofsd.
        assert_eq!(config.xattr, mode != Negotiation::Never, "{args:?}");
    }
    // `--posix-acl VALUE` is not a value: `=` is required.
    assert!(fail(&["--posix-acl", "auto"]).contains("auto"));
    assert!(fail(&["--posix-acl=sometimes"]).contains("sometimes"));
    for (args, on) in [
        (&["--allow-direct-io"][..], true),
        (&["-o", "allow_direct_io"], true),
        (&["--allow-direct-io", "-o", "no_allow_direct_io"], false),
        (&[], false),
    ] {
        assert_eq!(run(args).allow_direct_io, on, "{args:?}");
    }
}

#[test]
fn security_label_modes() {
    for (args, mode) in [
        (&["--security-label"][..], Negotiation::Always),
        (&["--security-label=always"], Negotiation::Always),
        (&["--security-label=auto"], Negotiation::Auto),
        (&["--security-label=never"], Negotiation::Never),
        (&[], Negotiation::Never),
        (&["-o", "security_label"], Negotiation::Always),
        (
            &["--security-label=auto", "-o", "no_security_label"],
            Negotiation::Never,
        ),
        (
            &["-o", "no_security_label,security_label"],
            Negotiation::Always,
        ),
        // mkosi's line.
        (
            &[
                "--security-label",
                "--no-announce-submounts",
                "--sandbox=chroot",
            ],
            Negotiation::Always,
        ),
    ] {
        let config = run(args);
        assert_eq!(config.security_label, mode, "{args:?}");
        // Labels imply --xattr, as in virtiofsd.
        assert_eq!(config.xattr, mode != Negotiation::Never, "{args:?}");
    }
    // `--security-label VALUE` is not a value: `=` is required, as in virtiofsd.
    assert!(fail(&["--security-label", "auto"]).contains("auto"));
    assert!(fail(&["--security-label=sometimes"]).contains("sometimes"));
}

#[test]
fn harmless_forms_are_accepted() {
    let config = run(&[
        "--sandbox=none",
        "--seccomp=none",
        "--posix-acl=never",
        "--security-label=never",
        "--no-killpriv-v2",
        "--killpriv-v2",
        "--no-killpriv-v2",
        "--sandbox=NONE",
    ]);
    assert_eq!(config.deprecations, Vec::<String>::new());
}

#[test]
fn bad_values() {
    for (args, expected) in [
        (
            &["--cache=sometimes"][..],
            "invalid value 'sometimes' for '--cache <CACHE>': expected one of: auto, always, metadata, never",
        ),
        (
            &["--inode-file-handles=maybe"],
            "invalid value 'maybe' for '--inode-file-handles=<INODE_FILE_HANDLES>': expected one of: never, fallback, prefer, mandatory",
        ),
        (
            &["--log-level=loud"],
            "invalid value 'loud' for '--log-level <LOG_LEVEL>': expected one of: error, warn, info, debug, trace, off",
        ),
        (
            &["--sandbox=jail"],
            "invalid value 'jail' for '--sandbox <SANDBOX>': expected one of: namespace, chroot, none",
        ),
        (
            &["--posix-acl=yes"],
            "invalid value 'yes' for '--posix-acl[=<never|auto|always>]': expected one of: never, auto, always",
        ),
        (
            &["--tag="],
            "invalid value '' for '--tag <TAG>': the tag may not be empty or longer than 36 bytes (encoded as UTF-8)",
        ),
        (&["-o", "cache=never"], "invalid compat value 'never' for '-o cache'"),
        (&["-o", "loglevel=trace"], "invalid compat value 'trace' for '-o loglevel'"),
        (&["-o", "sandbox=none"], "invalid compat value 'none' for '-o sandbox'"),
        (&["-o", "flock"], "invalid compat argument '-o flock'"),
        (&["-o", "posix_lock"], "invalid compat argument '-o posix_lock'"),
        (&["-o", "xattr,"], "invalid compat argument '-o '"),
        (&["-o", "bogus=1"], "invalid compat argument '-o bogus=1'"),
    ] {
        assert_eq!(fail(args), expected, "{args:?}");
    }
    // clap's own errors, reduced to their first line.
    for (args, start) in [
        (
            &["--thread-pool-size=-1"][..],
            "invalid value '-1' for '--thread-pool-size",
        ),
        (
            &["--rlimit-nofile=lots"],
            "invalid value 'lots' for '--rlimit-nofile",
        ),
        (&["--fd=x"], "invalid value 'x' for '--fd <FD>'"),
        (&["--inode-file-handles", "never"], "equal sign is needed"),
        (
            &["--no-such-option"],
            "unexpected argument '--no-such-option' found",
        ),
        (&["--cache"], "a value is required for '--cache <CACHE>'"),
        (
            &["--tag=0123456789012345678901234567890123456"],
            "invalid value",
        ),
    ] {
        let message = fail(args);
        assert!(message.contains(start), "{args:?}: {message}");
    }
}

#[test]
fn requirements() {
    // Without a socket option, the socket must come from systemd (checked at start-up).
    let Ok(Action::Run(config)) = parse(&["--shared-dir=/srv"]) else {
        panic!("--shared-dir alone refused");
    };
    assert_eq!(config.socket, SocketSource::Activation);
    assert_eq!(
        parse(&["--socket-path=/s"]),
        Err(CliError::new(
            "missing \"--shared-dir\" or \"-o source\" option"
        ))
    );
    let message = parse(&["--socket-path=/s", "--shared-dir=/srv", "--fd=3"])
        .unwrap_err()
        .to_string();
    assert!(message.contains("cannot be used with"), "{message}");
}

#[test]
fn fd_validation() {
    let dir = TempDir::new("vhostfs-cli").unwrap();
    let listener = UnixListener::bind(dir.join("listen.sock")).unwrap();
    let fd = listener.as_raw_fd().to_string();
    let arg = format!("--fd={fd}");
    let Ok(Action::Run(config)) = parse(&[&arg, "--shared-dir=/srv"]) else {
        panic!("a listening socket was refused");
    };
    assert_eq!(config.socket, SocketSource::Fd(listener.as_raw_fd()));

    let file = std::fs::File::open("/dev/null").unwrap();
    let arg = format!("--fd={}", file.as_raw_fd());
    assert_eq!(
        parse(&[&arg, "--shared-dir=/srv"]).unwrap_err().to_string(),
        format!(
            "invalid value '{}' for '--fd <FD>': not a socket",
            file.as_raw_fd()
        )
    );
    for bad in ["--fd=987654", "--fd=-1"] {
        let message = parse(&[bad, "--shared-dir=/srv"]).unwrap_err().to_string();
        assert!(message.contains("not an open file descriptor"), "{message}");
        assert!(message.contains("Bad file descriptor"), "{message}");
    }
    drop(listener);
}
