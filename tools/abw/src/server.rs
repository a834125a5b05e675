//! Server side (the measurement server): accepts control connections one
//! session at a time (a second concurrent client gets a `busy` error),
//! receives uplink probe streams and reports their timestamps, or sends
//! reverse probe streams to the client's NAT-mapped UDP address. The TCP
//! control port and the UDP probe port have the same number.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::clock::{tighten_timer_slack, unix_s};
use crate::collector::Collector;
use crate::error::{AbwError, Result};
use crate::method::ProbeSpec;
use crate::packet::{MAX_PACKET_SIZE, MIN_PACKET_SIZE};
use crate::protocol::{Control, Msg, VERSION};
use crate::sender::send_stream;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// TCP control and UDP probe address (same port for both).
    pub listen: SocketAddr,
    /// A session whose client says nothing for this long is ended.
    pub idle_timeout: Duration,
    /// Spin window of the pacer for reverse streams (client may lower it).
    pub max_spin: Duration,
    /// Serve one session and return (tests).
    pub once: bool,
}

struct Shared {
    udp: UdpSocket,
    collector: Collector,
    busy: Mutex<()>,
    cfg: ServerConfig,
}

/// Longest reverse stream the server agrees to send (seconds).
const MAX_STREAM_S: f64 = 60.0;
/// Most packets in one reverse stream.
const MAX_STREAM_PACKETS: usize = 100_000;

fn emit(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// Bind and serve forever (or one session with `once`).
pub fn serve(cfg: ServerConfig) -> Result<()> {
    tighten_timer_slack();
    let listener =
        TcpListener::bind(cfg.listen).map_err(|e| AbwError::io(format!("binding TCP {}", cfg.listen), e))?;
    let tcp_addr = listener
        .local_addr()
        .map_err(|e| AbwError::io("reading TCP address", e))?;
    let udp = UdpSocket::bind(tcp_addr).map_err(|e| AbwError::io(format!("binding UDP {tcp_addr}"), e))?;
    let collector = Collector::start(&udp)?;
    emit(json!({"event": "listening", "tcp": tcp_addr.to_string(), "udp": tcp_addr.to_string(), "version": VERSION}));
    let shared = Arc::new(Shared {
        udp,
        collector,
        busy: Mutex::new(()),
        cfg: cfg.clone(),
    });
    for conn in listener.incoming() {
        let conn = match conn {
            Ok(c) => c,
            Err(_) => continue,
        };
        if cfg.once {
            handle(conn, &shared);
            return Ok(());
        }
        let sh = shared.clone();
        let _ = std::thread::Builder::new()
            .name("abw-session".into())
            .spawn(move || handle(conn, &sh));
    }
    Ok(())
}

#[derive(Default)]
struct Tally {
    streams: u64,
    packets_received: u64,
    packets_sent: u64,
    bytes_received: u64,
    bytes_sent: u64,
}

fn handle(conn: TcpStream, sh: &Shared) {
    let started = Instant::now();
    let start_s = unix_s();
    let mut control = match Control::new(conn) {
        Ok(c) => c,
        Err(_) => return,
    };
    let peer = control.peer();
    let mut tally = Tally::default();
    let mut session = 0u64;
    let mut reverse = false;
    let r = (|| -> Result<()> {
        let (s, rev) = match control.recv(Duration::from_secs(10), "hello")? {
            Msg::Hello { version, session, reverse } if version == VERSION => (session, reverse),
            Msg::Hello { version, .. } => {
                let message = format!("protocol version {version} not supported (server speaks {VERSION})");
                control.send(&Msg::Error { kind: "protocol".into(), message: message.clone() })?;
                return Err(AbwError::Protocol(message));
            }
            m => return Err(AbwError::Protocol(format!("expected hello, got {m:?}"))),
        };
        session = s;
        reverse = rev;
        let _guard = match sh.busy.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                control.send(&Msg::Error {
                    kind: "busy".into(),
                    message: "another measurement session is running; retry later".into(),
                })?;
                return Err(AbwError::Busy("refused concurrent session".into()));
            }
        };
        sh.collector.reset(session);
        control.send(&Msg::HelloOk {
            version: VERSION,
            udp_port: sh.udp.local_addr().map(|a| a.port()).unwrap_or(0),
        })?;
        let mut peer_udp: Option<SocketAddr> = None;
        loop {
            match control.recv(sh.cfg.idle_timeout, "request")? {
                Msg::StreamEnd { stream, sent, grace_ms } => {
                    let grace = Duration::from_millis(grace_ms.clamp(1, 5000));
                    let o = sh.collector.wait_stream(stream, sent, grace, grace + Duration::from_secs(5));
                    tally.streams += 1;
                    tally.packets_received += o.rx.len() as u64;
                    tally.bytes_received += (o.rx.len() * o.size) as u64;
                    control.send(&Msg::StreamReport {
                        stream,
                        rx: o.rx.iter().map(|r| [r.seq as u64, r.send_ns, r.recv_ns]).collect(),
                    })?;
                }
                Msg::Punch {} => match sh.collector.wait_punch(Duration::from_secs(2)) {
                    Some(a) => {
                        peer_udp = Some(a);
                        control.send(&Msg::PunchOk { addr: a.to_string() })?;
                    }
                    None => control.send(&Msg::Error {
                        kind: "no_probes".into(),
                        message: "no UDP punch packet received from the client".into(),
                    })?,
                },
                Msg::SendStream { stream, size, offsets_ns, spin_us } => {
                    let Some(dest) = peer_udp else {
                        control.send(&Msg::Error {
                            kind: "protocol".into(),
                            message: "send_stream before a successful punch".into(),
                        })?;
                        continue;
                    };
                    let spec = ProbeSpec { size, offsets_ns, pause_s: 0.0, rate_bps: 0.0, lead: 0 };
                    if !(MIN_PACKET_SIZE..=MAX_PACKET_SIZE).contains(&size)
                        || spec.offsets_ns.is_empty()
                        || spec.offsets_ns.len() > MAX_STREAM_PACKETS
                        || spec.duration_s() > MAX_STREAM_S
                        || spec.offsets_ns.windows(2).any(|w| w[1] < w[0])
                    {
                        control.send(&Msg::Error {
                            kind: "config".into(),
                            message: "stream request out of bounds".into(),
                        })?;
                        continue;
                    }
                    let spin = Duration::from_micros(spin_us).min(sh.cfg.max_spin);
                    let sent = send_stream(&sh.udp, Some(dest), session, stream, &spec, spin)?;
                    tally.streams += 1;
                    tally.packets_sent += sent.packets as u64;
                    tally.bytes_sent += sent.bytes;
                    control.send(&Msg::StreamSent { stream, sent: sent.packets })?;
                }
                Msg::Bye {} => return Ok(()),
                m => {
                    control.send(&Msg::Error {
                        kind: "protocol".into(),
                        message: format!("unexpected message {m:?}"),
                    })?;
                }
            }
        }
    })();
    let (ok, err, kind) = match &r {
        Ok(()) => (true, None, None),
        Err(e) => (false, Some(e.to_string()), Some(e.kind())),
    };
    emit(json!({
        "event": "session",
        "peer": peer,
        "session": format!("{session:016x}"),
        "direction": if reverse { "reverse" } else { "uplink" },
        "start_unix_s": start_s,
        "duration_s": started.elapsed().as_secs_f64(),
        "streams": tally.streams,
        "packets_received": tally.packets_received,
        "bytes_received": tally.bytes_received,
        "packets_sent": tally.packets_sent,
        "bytes_sent": tally.bytes_sent,
        "control_bytes": control.bytes_in + control.bytes_out,
        "ok": ok,
        "error": err,
        "kind": kind,
    }));
}
