//! The `vhostfs` command: parse the command line, set up logging, serve.

use std::process::ExitCode;

use vhostfs::cli::{self, Action};

fn main() -> ExitCode {
    let cfg = match cli::parse_args(std::env::args_os()) {
        Ok(Action::Run(cfg)) => *cfg,
        Ok(Action::PrintCapabilities) => {
            println!("{}", cli::capabilities_json());
            return ExitCode::SUCCESS;
        }
        Ok(Action::Stats(target)) => {
            return match vhostfs::daemon::stats_command(&target) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("vhostfs stats: error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Ok(Action::Upgrade(target)) => {
            return match vhostfs::daemon::upgrade_command(&target) {
                Ok(pid) => {
                    println!("upgraded: pid {pid} serves");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("vhostfs upgrade: error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Ok(Action::Exit { text, stderr, code }) => {
            if stderr {
                eprint!("{text}");
            } else {
                print!("{text}");
            }
            return ExitCode::from(code as u8);
        }
        Err(e) => {
            eprintln!("vhostfs: error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = vhostfs::logger::init(cfg.log_level, cfg.syslog) {
        eprintln!("vhostfs: error: {e}");
        return ExitCode::FAILURE;
    }
    for d in &cfg.deprecations {
        log::warn!("{d}");
    }
    let syslog = cfg.syslog;
    match vhostfs::daemon::run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if syslog {
                log::error!("{e}");
            }
            eprintln!("vhostfs: error: {e}");
            ExitCode::FAILURE
        }
    }
}
