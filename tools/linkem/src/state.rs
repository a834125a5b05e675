//! The link state that an emulated modem reader consumes, and the adapter
//! that publishes it as a JSON file (written atomically: a reader never sees
//! half a document) and answers it on a UDP port.
//!
//! Format (`format_version` 1), one JSON object:
//! ```json
//! {"format_version":1,"time_unix_ms":1700000000000,"epoch_monotonic_ns":123,
//!  "emulator_time_s":12.3,"operator":{"mcc_mnc":"242-01","name":"Telenor","country":"NO"},
//!  "rat":"LTE","cell_id":1234567,"band":"B20","handovers":2,"in_outage":false,
//!  "position":{"lat":59.91,"lon":10.75,"speed_mps":25.0,"heading_deg":71.3},
//!  "signal":{"rssi_dbm":-60.0,"rsrp_dbm":-85.0,"rsrq_db":-8.0,"sinr_db":18.0},
//!  "local_hour":14,"diurnal_factor":0.8,"radio_idle":false,"promotions":1,
//!  "uplink":{"rate_bps":5000000.0,"delivered_bps":4900000.0,"queue_packets":3,"queue_bytes":4500,
//!            "stats":{"rx_packets":..,"rx_bytes":..,"tx_packets":..,"tx_bytes":..,
//!                     "dropped_loss":0,"dropped_queue":0,"dropped_outage":0,"flows":1}},
//!  "downlink":{...}}
//! ```

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::link::LinkStats;
use crate::profile::Operator;
use crate::route::Position;
use crate::signal::Signal;
use crate::Error;

/// Version of the state document; bump on incompatible changes.
pub const FORMAT_VERSION: u32 = 1;

/// State of one direction.
#[derive(Debug, Clone, Serialize)]
pub struct DirectionState {
    /// Rate a saturating flow would get now, bits/s; null when unlimited.
    pub rate_bps: Option<f64>,
    pub queue_packets: usize,
    pub queue_bytes: usize,
    pub stats: LinkStats,
}

/// What the pure emulator knows at an instant.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    pub emulator_time_s: f64,
    pub operator: Operator,
    pub rat: String,
    pub cell_id: u64,
    /// Band of the serving cell ("B3"); null when the profile names none.
    pub band: Option<String>,
    /// GPS fix of a moving node (profile `route:`); null for a fixed node.
    pub position: Option<Position>,
    pub handovers: u64,
    pub in_outage: bool,
    pub signal: Signal,
    /// Emulated local hour (with time compression); null without diurnal.
    pub local_hour: Option<usize>,
    pub diurnal_factor: f64,
    pub radio_idle: bool,
    pub promotions: u64,
    pub uplink: DirectionState,
    pub downlink: DirectionState,
}

/// Delivered rate over the last publication interval, per direction.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Delivered {
    pub uplink_bps: f64,
    pub downlink_bps: f64,
}

/// The published document: the snapshot plus wall-clock context.
#[derive(Debug, Clone, Serialize)]
pub struct LinkState {
    pub format_version: u32,
    pub time_unix_ms: i64,
    /// CLOCK_MONOTONIC at the emulator's epoch (trace time 0), so that
    /// tools in other network namespaces can align with the trace.
    pub epoch_monotonic_ns: u64,
    pub delivered: Delivered,
    #[serde(flatten)]
    pub snapshot: Snapshot,
}

impl LinkState {
    /// The document as one line of JSON.
    pub fn to_json(&self) -> String {
        // Serialising plain numbers and strings cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// Writes `text` to `path` atomically: a temporary file in the same folder,
/// then a rename, which POSIX guarantees to be atomic.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), Error> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.write_all(b"\n").map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io)
}

/// The latest published document, shared with the HTTP endpoint's thread.
pub type SharedState = Arc<Mutex<String>>;

/// Serves `GET` (any path) with the latest document on `listener`, one
/// short connection at a time, on its own thread so that a slow client
/// never delays packets. Returns when the listener fails.
pub fn serve_http(listener: TcpListener, shared: SharedState) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { continue };
        let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
        let _ = conn.set_write_timeout(Some(Duration::from_millis(500)));
        // Read the request head (clients send it at once); its content does
        // not matter: there is one resource.
        let mut head = [0u8; 2048];
        let _ = conn.read(&mut head);
        let body = shared.lock().map(|s| s.clone()).unwrap_or_default();
        let response = format!(
            "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{}",
            body.len(),
            body
        );
        let _ = conn.write_all(response.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_endpoint_serves_the_latest_document() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared: SharedState = Arc::new(Mutex::new("{\"a\":1}".into()));
        let s2 = Arc::clone(&shared);
        std::thread::spawn(move || serve_http(listener, s2));
        *shared.lock().unwrap() = "{\"a\":2}".into();
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /state HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
        assert!(text.ends_with("{\"a\":2}"), "{text}");
    }

    #[test]
    fn atomic_write_replaces_the_file() {
        let dir = std::env::temp_dir().join(format!("linkem-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("state.json");
        write_atomic(&p, "{\"a\":1}").unwrap();
        write_atomic(&p, "{\"a\":2}").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "{\"a\":2}\n");
        assert!(!dir.join("state.json.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
