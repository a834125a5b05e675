//! The library's error vocabulary.

use std::path::PathBuf;

/// Everything that can go wrong in the library, with messages that say what
/// to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be read or written.
    #[error("cannot access {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A Mahimahi trace is malformed.
    #[error("invalid trace {path}: {reason} (expected one non-decreasing integer millisecond per line)")]
    Trace { path: PathBuf, reason: String },
    /// A profile does not parse as YAML of the expected shape.
    #[error("cannot parse profile {path}: {source}")]
    Yaml {
        path: PathBuf,
        #[source]
        source: serde_yaml::Error,
    },
    /// A profile parses but its values are inconsistent.
    #[error("invalid profile: {0}")]
    Profile(String),
    /// A time zone is neither an IANA name nor a UTC offset.
    #[error("unknown time zone {0:?}: use an IANA name such as Europe/Oslo or an offset such as +01:00")]
    TimeZone(String),
    /// A TUN device could not be opened or configured.
    #[error("TUN device {name}: {source} (are you root or CAP_NET_ADMIN, and does /dev/net/tun exist?)")]
    Tun {
        name: String,
        #[source]
        source: std::io::Error,
    },
    /// Any other I/O failure of the forwarding loop.
    #[error("{what}: {source}")]
    Os {
        what: String,
        #[source]
        source: std::io::Error,
    },
}
