//! `--cache=auto|always|metadata|never`: the caching policy told to the guest.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The caching policy told to the guest (`--cache=auto|always|metadata|never`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    /// Close-to-open consistency, 1 s metadata timeouts (the default).
    Auto,
    /// The guest may cache data and metadata for a day.
    Always,
    /// Metadata is cached for a day, file data is not cached.
    Metadata,
    /// Nothing is cached: direct I/O, zero timeouts.
    Never,
}

impl CacheMode {
    /// Entry (dentry) timeout given to the guest, as virtiofsd does.
    pub fn entry_timeout(self) -> Duration {
        match self {
            CacheMode::Auto => Duration::from_secs(1),
            CacheMode::Always | CacheMode::Metadata => Duration::from_secs(86400),
            CacheMode::Never => Duration::ZERO,
        }
    }

    /// Attribute timeout given to the guest; the same as [`CacheMode::entry_timeout`].
    pub fn attr_timeout(self) -> Duration {
        self.entry_timeout()
    }

    /// Whether opened files must bypass the guest page cache (`FOPEN_DIRECT_IO`).
    pub fn direct_io(self) -> bool {
        self == CacheMode::Never
    }

    /// The option value naming this mode (`auto`, `always`, `metadata`, `never`).
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::Auto => "auto",
            CacheMode::Always => "always",
            CacheMode::Metadata => "metadata",
            CacheMode::Never => "never",
        }
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CacheMode {
    type Err = String;

    /// Parses a `--cache` value; case-insensitive like virtiofsd.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(CacheMode::Auto),
            "always" => Ok(CacheMode::Always),
            "metadata" => Ok(CacheMode::Metadata),
            "never" => Ok(CacheMode::Never),
            _ => Err("expected one of: auto, always, metadata, never".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_direct_io_and_names() {
        let day = Duration::from_secs(86400);
        assert_eq!(CacheMode::Auto.entry_timeout(), Duration::from_secs(1));
        assert_eq!(CacheMode::Auto.attr_timeout(), Duration::from_secs(1));
        assert_eq!(CacheMode::Always.entry_timeout(), day);
        assert_eq!(CacheMode::Metadata.attr_timeout(), day);
        assert_eq!(CacheMode::Never.entry_timeout(), Duration::ZERO);
        assert_eq!(CacheMode::Never.attr_timeout(), Duration::ZERO);
        assert!(CacheMode::Never.direct_io());
        for mode in [CacheMode::Auto, CacheMode::Always, CacheMode::Metadata] {
            assert!(!mode.direct_io());
        }
        for mode in [
            CacheMode::Auto,
            CacheMode::Always,
            CacheMode::Metadata,
            CacheMode::Never,
        ] {
            assert_eq!(mode.to_string().parse::<CacheMode>(), Ok(mode));
        }
    }
}
