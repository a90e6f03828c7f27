//! The options that change what the guest is offered or how files are opened, and where the
//! socket goes: `--no-readdirplus`, `--preserve-noatime`, `--allow-mmap`, `--socket-group`.

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
