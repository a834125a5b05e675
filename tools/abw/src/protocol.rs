//! Control protocol: newline-delimited JSON messages over one TCP
//! connection that the client (the node, possibly behind NAT) always opens.
//!
//! ```text
//! client -> server  hello {version, session, reverse}
//! server -> client  hello_ok {version, udp_port} | error {kind, message}
//! uplink (client sends probes):
//!   client: UDP probes ...; stream_end {stream, sent, grace_ms}
//!   server: stream_report {stream, rx: [[seq, send_ns, recv_ns], ...]}
//! reverse (server sends probes), after NAT punching:
//!   client: UDP punch packets; punch {}        server: punch_ok {addr}
//!   client: send_stream {stream, size, offsets_ns, spin_us}
//!   server: UDP probes ...; stream_sent {stream, sent}
//! client -> server  bye {}
//! ```
//! Every read has a timeout; a closed, reset or silent connection becomes
//! `AbwError::ControlLost`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{AbwError, Result};

/// Protocol version; bumped on incompatible changes.
pub const VERSION: u32 = 1;
/// Longest accepted control message (bytes).
const MAX_LINE: u64 = 8 << 20;

/// A control message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Msg {
    Hello {
        version: u32,
        session: u64,
        reverse: bool,
    },
    HelloOk {
        version: u32,
        udp_port: u16,
    },
    Error {
        kind: String,
        message: String,
    },
    Punch {},
    PunchOk {
        addr: String,
    },
    StreamEnd {
        stream: u32,
        sent: u32,
        grace_ms: u64,
    },
    StreamReport {
        stream: u32,
        rx: Vec<[u64; 3]>,
    },
    SendStream {
        stream: u32,
        size: usize,
        offsets_ns: Vec<u64>,
        spin_us: u64,
    },
    StreamSent {
        stream: u32,
        sent: u32,
    },
    Bye {},
}

/// A control connection with byte counters and per-read timeouts.
pub struct Control {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    /// Bytes written and read (application payload).
    pub bytes_out: u64,
    pub bytes_in: u64,
}

impl Control {
    pub fn new(stream: TcpStream) -> Result<Control> {
        let _ = stream.set_nodelay(true);
        let r = stream
            .try_clone()
            .map_err(|e| AbwError::io("cloning control socket", e))?;
        Ok(Control {
            writer: stream,
            reader: BufReader::new(r),
            bytes_out: 0,
            bytes_in: 0,
        })
    }

    /// Peer address, for logs.
    pub fn peer(&self) -> String {
        self.writer
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into())
    }

    /// Send one message.
    pub fn send(&mut self, msg: &Msg) -> Result<()> {
        let mut line = serde_json::to_vec(msg).map_err(|e| AbwError::Protocol(e.to_string()))?;
        line.push(b'\n');
        let _ = self.writer.set_write_timeout(Some(Duration::from_secs(10)));
        self.writer
            .write_all(&line)
            .map_err(|e| AbwError::ControlLost(format!("write failed: {e}")))?;
        self.bytes_out += line.len() as u64;
        Ok(())
    }

    /// Receive one message, waiting at most `timeout`; `what` names what we
    /// wait for in the error message.
    pub fn recv(&mut self, timeout: Duration, what: &str) -> Result<Msg> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(|e| AbwError::io("setting control read timeout", e))?;
        let mut line = String::new();
        let n = (&mut self.reader)
            .take(MAX_LINE)
            .read_line(&mut line)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    AbwError::ControlLost(format!(
                        "no {what} within {:.1} s",
                        timeout.as_secs_f64()
                    ))
                }
                _ => AbwError::ControlLost(format!("read failed waiting for {what}: {e}")),
            })?;
        if n == 0 {
            return Err(AbwError::ControlLost(format!(
                "connection closed by peer while waiting for {what}"
            )));
        }
        self.bytes_in += n as u64;
        serde_json::from_str(line.trim_end())
            .map_err(|e| AbwError::Protocol(format!("bad message while waiting for {what}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_json_shape() {
        let m = Msg::StreamEnd { stream: 3, sent: 50, grace_ms: 100 };
        let s = serde_json::to_string(&m).unwrap();
        assert_eq!(s, r#"{"type":"stream_end","stream":3,"sent":50,"grace_ms":100}"#);
        let back: Msg = serde_json::from_str(&s).unwrap();
        assert_eq!(back, m);
        let b: Msg = serde_json::from_str(r#"{"type":"bye"}"#).unwrap();
        assert_eq!(b, Msg::Bye {});
    }
}
