//! The legacy `-o opt,opt=value,...` forms (as libvirt still emits them), applied on top of the
//! long options as virtiofsd applies them.

use super::*;

/// A setting that `-o` may override, with the spelling that last set it (for error messages).
pub(super) struct Tracked<T> {
    pub(super) value: T,
    pub(super) spelling: String,
}

impl<T> Tracked<T> {
    pub(super) fn new(value: T, spelling: impl Into<String>) -> Self {
        Tracked {
            value,
            spelling: spelling.into(),
        }
    }

    pub(super) fn set(&mut self, value: T, spelling: &str) {
        self.value = value;
        self.spelling = spelling.to_string();
    }
}

/// The settings after `-o` forms are applied on top of the long options (as virtiofsd does).
pub(super) struct Effective {
    pub(super) shared_dir: Option<PathBuf>,
    pub(super) cache: CacheMode,
    pub(super) log_level: log::LevelFilter,
    pub(super) xattr: bool,
    pub(super) announce_submounts: bool,
    pub(super) readdirplus: bool,
    pub(super) writeback: bool,
    pub(super) allow_direct_io: bool,
    pub(super) killpriv_v2: Tracked<bool>,
    pub(super) posix_acl: String,
    pub(super) security_label: String,
    pub(super) sandbox: Tracked<String>,
    /// The map and how it was given (`--xattrmap` or `-o xattrmap=...`).
    pub(super) xattrmap: Option<(String, String)>,
    pub(super) modcaps: Option<ModCaps>,
}

impl Effective {
    pub(super) fn from_opt(opt: &Opt) -> Self {
        let flag = |on: bool, name: &str| Tracked::new(on, format!("--{name}"));
        let valued = |v: &str, name: &str| Tracked::new(v.to_string(), format!("--{name}={v}"));
        Effective {
            shared_dir: opt.shared_dir.clone(),
            cache: opt.cache,
            log_level: opt.log_level,
            xattr: opt.xattr,
            announce_submounts: !opt.no_announce_submounts,
            readdirplus: !opt.no_readdirplus,
            writeback: opt.writeback,
            allow_direct_io: opt.allow_direct_io,
            killpriv_v2: flag(opt.killpriv_v2, "killpriv-v2"),
            posix_acl: opt.posix_acl.clone(),
            security_label: opt.security_label.clone(),
            sandbox: valued(&opt.sandbox, "sandbox"),
            xattrmap: opt.xattrmap.clone().map(|m| (m, "--xattrmap".to_string())),
            modcaps: opt.modcaps.clone(),
        }
    }

    /// Applies one `-o` item (`key=value` or `flag`), with virtiofsd's keys and values.
    pub(super) fn apply_compat(&mut self, item: &str) -> Result<(), CliError> {
        let spelling = format!("-o {item}");
        let invalid_value = |key: &str, value: &str| {
            CliError::new(format!("invalid compat value '{value}' for '-o {key}'"))
        };
        if let Some((key, value)) = item.split_once('=') {
            match key {
                "source" => self.shared_dir = Some(PathBuf::from(value)),
                "cache" => {
                    self.cache = match value {
                        "auto" => CacheMode::Auto,
                        "always" => CacheMode::Always,
                        "none" => CacheMode::Never,
                        "metadata" => CacheMode::Metadata,
                        _ => return Err(invalid_value(key, value)),
                    }
                }
                "loglevel" => {
                    self.log_level = match value {
                        "debug" => log::LevelFilter::Debug,
                        "info" => log::LevelFilter::Info,
                        "warn" => log::LevelFilter::Warn,
                        "err" => log::LevelFilter::Error,
                        _ => return Err(invalid_value(key, value)),
                    }
                }
                "sandbox" if ["namespace", "chroot"].contains(&value) => {
                    self.sandbox.set(value.to_string(), &spelling)
                }
                "sandbox" => return Err(invalid_value(key, value)),
                "xattrmap" => self.xattrmap = Some((value.to_string(), "-o xattrmap".to_string())),
                "modcaps" => {
                    self.modcaps = Some(value.parse().map_err(|e| {
                        CliError::new(format!(
                            "invalid compat value '{value}' for '-o modcaps': {e}"
                        ))
                    })?)
                }
                _ => return Err(invalid_compat_argument(item)),
            }
            return Ok(());
        }
        let negotiation = |on: bool| if on { "always" } else { "never" }.to_string();
        match item {
            "xattr" | "no_xattr" => self.xattr = item == "xattr",
            "announce_submounts" => self.announce_submounts = true,
            "readdirplus" | "no_readdirplus" => self.readdirplus = item == "readdirplus",
            "writeback" | "no_writeback" => self.writeback = item == "writeback",
            "allow_direct_io" | "no_allow_direct_io" => {
                self.allow_direct_io = item == "allow_direct_io"
            }
            "killpriv_v2" | "no_killpriv_v2" => {
                self.killpriv_v2.set(item == "killpriv_v2", &spelling)
            }
            "posix_acl" | "no_posix_acl" => self.posix_acl = negotiation(item == "posix_acl"),
            "security_label" | "no_security_label" => {
                self.security_label = negotiation(item == "security_label")
            }
            // Accepted and ignored by virtiofsd too (it never implemented flock/posix locks).
            "no_posix_lock" | "no_flock" => {}
            _ => return Err(invalid_compat_argument(item)),
        }
        Ok(())
    }
}

pub(super) fn invalid_compat_argument(item: &str) -> CliError {
    CliError::new(format!("invalid compat argument '-o {item}'"))
}
