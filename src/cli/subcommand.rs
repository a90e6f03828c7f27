//! What the subcommands' command lines (`vhostfs upgrade`, `vhostfs stats`) share: their
//! options take one value each, and name a daemon by its vhost-user socket the same way.

use std::path::PathBuf;

use clap::{Arg, ArgAction};

/// A `--ID VALUE` option taking one value.
pub(super) fn option(id: &'static str, value: &'static str, help: &'static str) -> Arg {
    Arg::new(id)
        .long(id)
        .value_name(value)
        .help(help)
        .action(ArgAction::Set)
}

/// `--socket-path`: the daemon's vhost-user socket, whose pid file names the daemon.
pub(super) fn socket_path() -> Arg {
    option(
        "socket-path",
        "SOCKET_PATH",
        "The daemon's vhost-user socket (its pid file <SOCKET_PATH>.pid names it)",
    )
    .value_parser(clap::value_parser!(PathBuf))
}
