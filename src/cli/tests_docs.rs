//! Unit tests of what the command line shows and documents: `--print-capabilities`, `--help`
//! and `--version`, virtiofsd's options one by one, docs/options.md, the options README.md
//! names, the id map syntax.

use super::tests::{fail, parse, run};
use super::*;

#[test]
fn capabilities() {
    assert_eq!(
        parse(&["--print-capabilities"]),
        Ok(Action::PrintCapabilities)
    );
    // Honoured whatever else is given, once the syntax is valid.
    assert_eq!(
        parse(&["--print-capabilities", "--writeback", "-o", "cache=auto"]),
        Ok(Action::PrintCapabilities)
    );
    assert!(parse(&["--print-capabilities", "-o", "nope"]).is_err());
    // virtiofsd 1.14's output, byte for byte.
    assert_eq!(
        capabilities_json(),
        "{\n  \"type\": \"fs\",\n  \"features\": [\n    \"migrate-precopy\",\n    \
         \"posix-acl-negotiation-mode\",\n    \"security-label-negotiation-mode\",\n    \
         \"separate-options\"\n  ]\n}"
    );
    // What each listed feature promises works: every mode of both options, and each option
    // given separately.
    for mode in ["never", "auto", "always"] {
        let config = run(&[
            &format!("--posix-acl={mode}"),
            &format!("--security-label={mode}"),
        ]);
        assert_eq!(config.posix_acl.as_str(), mode);
        assert_eq!(config.security_label.as_str(), mode);
    }
}

#[test]
fn help_and_version() {
    let Ok(Action::Exit { text, stderr, code }) = parse(&["--version"]) else {
        panic!("--version");
    };
    assert_eq!(text, format!("vhostfs {}\n", env!("CARGO_PKG_VERSION")));
    assert!(!stderr);
    assert_eq!(code, 0);

    for flag in ["--help", "-h"] {
        let Ok(Action::Exit { text, stderr, code }) = parse(&[flag]) else {
            panic!("{flag}");
        };
        assert!(
            text.contains("--inode-file-handles=<INODE_FILE_HANDLES>"),
            "{text}"
        );
        assert!(!text.contains('\u{1b}'), "help must be plain text");
        assert!(!stderr);
        assert_eq!(code, 0);
    }

    let Ok(Action::Exit { text, stderr, code }) = parse(&[]) else {
        panic!("no arguments");
    };
    assert!(
        text.contains("Usage: vhostfs --shared-dir <SHARED_DIR>"),
        "{text}"
    );
    assert!(stderr);
    assert_eq!(code, 2);
}

/// Every option of `virtiofsd --help` (1.14), given with valid syntax, is known to the parser:
/// it is either accepted or refused as not supported yet, never as unknown.
#[test]
fn every_virtiofsd_option_is_known() {
    let every = [
        &["--tag=x"][..],
        &["--socket=/s"],
        &["--socket-group=kvm"],
        &["--thread-pool-size=4"],
        &["--xattr"],
        &["--posix-acl"],
        &["--posix-acl=auto"],
        &["--xattrmap=:prefix:all::user.virtiofs.::bad:all:::"],
        &["--sandbox=chroot"],
        &["--readonly"],
        &["--seccomp=log"],
        &["--seccomp=trap"],
        &["--announce-submounts"],
        &["--no-announce-submounts"],
        &["--inode-file-handles=prefer"],
        &["--cache=auto"],
        &["--allow-mmap"],
        &["--no-readdirplus"],
        &["--writeback"],
        &["--allow-direct-io"],
        &["--print-capabilities"],
        &["--modcaps=-chown"],
        &["--log-level=trace"],
        &["--log-level=off"],
        &["--syslog"],
        &["--rlimit-nofile=0"],
        &["-o", "source=/x"],
        &["-d"],
        &["--no-killpriv-v2"],
        &["--killpriv-v2"],
        &["-f"],
        &["--security-label=auto"],
        &["--uid-map=:0:100000:65536:"],
        &["--gid-map=:0:100000:65536:"],
        &["--translate-uid=squash-guest:0:1000:4294967295"],
        &["--translate-gid=forbid-guest:0:10"],
        &["--preserve-noatime"],
        &["--migration-mode=file-handles"],
        &["--migration-on-error=abort"],
        &["--migration-verify-handles"],
        &["--migration-confirm-paths"],
    ];
    for args in every {
        // --socket replaces --socket-path here, as --socket-path would take precedence.
        let mut all = vec!["--shared-dir", "/srv"];
        if args[0] != "--socket=/s" {
            all.push("--socket-path=/tmp/vm.sock");
        }
        all.extend_from_slice(args);
        match parse(&all) {
            Ok(_) => {}
            Err(e) => assert!(
                e.message().starts_with("not supported yet: "),
                "{args:?}: {e}"
            ),
        }
    }
}

/// docs/options.md lists every option clap knows, so the table cannot drift from the parser.
#[test]
fn options_doc_lists_every_option() {
    let doc = include_str!("../../docs/options.md");
    let mut command = Opt::command();
    command.build();
    for arg in command.get_arguments() {
        let spelling = match (arg.get_long(), arg.get_short()) {
            (Some(long), _) => format!("`--{long}"),
            (None, Some(short)) => format!("`-{short}"),
            (None, None) => continue,
        };
        assert!(
            doc.lines()
                .any(|l| l.starts_with('|') && l.contains(spelling.as_str())),
            "docs/options.md has no table row for {spelling}`"
        );
    }
}

#[test]
fn id_maps_use_virtiofsd_syntax() {
    let config = run(&[
        "--uid-map=:0:100000:65536:",
        "--uid-map=/65536/1000/1/",
        "--gid-map=:0:100000:65536:",
    ]);
    let map = |inside, outside, count| IdMap {
        inside,
        outside,
        count,
    };
    assert_eq!(config.uid_map, [map(0, 100000, 65536), map(65536, 1000, 1)]);
    assert_eq!(config.gid_map, [map(0, 100000, 65536)]);
    for bad in [
        "0:100000:65536",
        ":0:100000:",
        ":0:100000:65536:1:",
        ":0:x:1:",
        "a0a1a1a",
        ":0/1/1:",
    ] {
        let e = fail(&[&format!("--uid-map={bad}")]);
        assert!(e.contains("--uid-map"), "{bad}: {e}");
    }
}

/// Options of other programs that README.md names (`cargo build --release`, `mount --bind`,
/// `vng --run ...`): anything else spelt `--name` there must be an option of vhostfs.
const README_OTHER_PROGRAMS: &[&str] = &[
    "release",      // cargo build
    "bench",        // cargo bench
    "bind",         // mount
    "make-rshared", // mount
    "run",          // vng
    "disable-kvm",  // vng
    "exec",         // vng
    "rw",           // vng
];

/// The `--name` words of `text` (`--` alone, or inside a word, is none).
fn long_options(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = text;
    let mut prev = ' ';
    while let Some(at) = rest.find("--") {
        prev = rest[..at].chars().next_back().unwrap_or(prev);
        let tail = &rest[at + 2..];
        let len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(tail.len());
        let name = tail[..len].trim_end_matches('-');
        if !(prev.is_ascii_alphanumeric() || prev == '-')
            && name.starts_with(|c: char| c.is_ascii_lowercase())
        {
            names.push(name);
        }
        prev = '-';
        rest = &tail[len..];
    }
    names
}

/// What `vhostfs --help`, `vhostfs stats --help` and `vhostfs upgrade --help` list.
fn help_options() -> Vec<String> {
    let mut names = Vec::new();
    for args in [
        &["--help"][..],
        &["stats", "--help"],
        &["upgrade", "--help"],
    ] {
        let Ok(Action::Exit { text, code: 0, .. }) = parse(args) else {
            panic!("{args:?}");
        };
        names.extend(long_options(&text).into_iter().map(String::from));
    }
    names
}

/// What is untrue in `readme`: an option no `--help` lists (and no other program's the README
/// names), or a paragraph saying options are "not supported yet" that names one the parser
/// accepts.
fn readme_problems(readme: &str) -> Vec<String> {
    let known = help_options();
    let mut problems = Vec::new();
    for name in long_options(readme) {
        if !known.iter().any(|k| k == name) && !README_OTHER_PROGRAMS.contains(&name) {
            problems.push(format!("--{name} is in no --help"));
        }
    }
    for paragraph in readme.split("\n\n") {
        if !paragraph.contains("not supported yet") {
            continue;
        }
        for name in long_options(paragraph) {
            let option = format!("--{name}");
            let refused = parse(&["--socket-path=/tmp/vm.sock", "--shared-dir=/srv", &option])
                .err()
                .is_some_and(|e| e.message() == format!("not supported yet: {option}"));
            if !refused {
                problems.push(format!("{option} is said to be not supported yet, but is"));
            }
        }
    }
    problems
}

/// README.md names only options vhostfs has, and claims none is "not supported yet" unless the
/// parser refuses it so.
#[test]
fn readme_names_only_real_options() {
    let problems = readme_problems(include_str!("../../README.md"));
    assert!(problems.is_empty(), "README.md: {problems:#?}");
    // The check bites: the README's claim of before --writeback and --killpriv-v2 were
    // implemented, and an option that does not exist.
    let old = "Options of virtiofsd that vhostfs does not implement yet (e.g. `--writeback`, \
               `--killpriv-v2`) are rejected with `not supported yet: OPTION`.\n\n\
               Use `--no-such-option`.";
    assert_eq!(
        readme_problems(old),
        [
            "--no-such-option is in no --help",
            "--writeback is said to be not supported yet, but is",
            "--killpriv-v2 is said to be not supported yet, but is",
        ]
    );
    assert_eq!(
        long_options("a -- b x--y `--cache=auto` --c-"),
        ["cache", "c"]
    );
}
