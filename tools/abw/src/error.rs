//! Error type of the library. Every variant maps to a stable `kind` string
//! that the CLI prints in its JSON error record.

use std::io;

/// Errors raised while running an estimate or serving sessions.
#[derive(Debug, thiserror::Error)]
pub enum AbwError {
    /// The receiver (server) could not be reached on its control port.
    #[error("receiver unreachable at {addr}: {source}")]
    Unreachable {
        addr: String,
        #[source]
        source: io::Error,
    },
    /// The control connection was closed, reset or timed out mid-session.
    #[error("control connection lost: {0}")]
    ControlLost(String),
    /// The server is serving another session.
    #[error("server busy: {0}")]
    Busy(String),
    /// Even the smallest probe rate is above the available bandwidth.
    #[error("link too slow: probing at {rate_bps:.0} bit/s (the minimum rate) still congests the path")]
    LinkTooSlow { rate_bps: f64 },
    /// Probe packets never arrived (UDP blocked, NAT not opened, ...).
    #[error("no probe packets received: {0}")]
    NoProbes(String),
    /// The peer sent something that does not follow the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Invalid parameters.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Any other I/O failure.
    #[error("i/o error during {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

impl AbwError {
    /// Stable machine-readable kind for JSON error records.
    pub fn kind(&self) -> &'static str {
        match self {
            AbwError::Unreachable { .. } => "unreachable",
            AbwError::ControlLost(_) => "control_lost",
            AbwError::Busy(_) => "busy",
            AbwError::LinkTooSlow { .. } => "link_too_slow",
            AbwError::NoProbes(_) => "no_probes",
            AbwError::Protocol(_) => "protocol",
            AbwError::Config(_) => "config",
            AbwError::Io { .. } => "io",
        }
    }

    /// Wrap an I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        AbwError::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result alias of the library.
pub type Result<T> = std::result::Result<T, AbwError>;
