//! Client side of a session (runs on the node): opens the control
//! connection, then either sends the probe streams itself (uplink, the
//! default) or asks the server to send them and receives them (reverse,
//! after opening the NAT with punch packets). The estimation method runs
//! here in both cases.

use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use crate::clock::{realtime_ns, sleep_s, tighten_timer_slack};
use crate::collector::Collector;
use crate::error::{AbwError, Result};
use crate::method::{Estimate, Method, ProbeSpec, Step};
use crate::observation::{Observation, Rx};
use crate::protocol::{Control, Msg, VERSION};
use crate::rng::Rng;
use crate::sender::{send_punch, send_stream};

/// Default TCP control port (the UDP probe port defaults to the same).
pub const DEFAULT_PORT: u16 = 7351;

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Server host name or address, optionally with `:port`.
    pub server: String,
    pub reverse: bool,
    pub connect_timeout: Duration,
    /// Timeout of each control-channel reply (plus the probe's duration).
    pub timeout: Duration,
    /// Receiver waits this long after the last packet of an incomplete
    /// stream before declaring the rest lost.
    pub grace: Duration,
    pub spin: Duration,
    /// Local address to bind both sockets to (interface selection).
    pub bind: Option<IpAddr>,
    /// Interface to bind both sockets to (SO_BINDTODEVICE, needs root).
    pub device: Option<String>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            server: String::new(),
            reverse: false,
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(10),
            grace: Duration::from_millis(100),
            spin: Duration::from_micros(150),
            bind: None,
            device: None,
        }
    }
}

/// Traffic counters of one estimate (probe traffic only, IP bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    pub streams: u64,
    pub packets_sent: u64,
    pub packets_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Control-channel payload bytes (both directions).
    pub control_bytes: u64,
}

/// One finished estimate with its bookkeeping.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub estimate: Estimate,
    pub counters: Counters,
    pub start_ns: u64,
    pub end_ns: u64,
    pub latency_s: f64,
}

/// Failed estimate with what it cost so far.
#[derive(Debug)]
pub struct Failure {
    pub error: AbwError,
    pub counters: Counters,
}

/// An open session with a server.
pub struct Session {
    cfg: ClientConfig,
    control: Control,
    udp: UdpSocket,
    collector: Option<Collector>,
    session: u64,
    next_stream: u32,
    /// When the last packet of the previous stream of this estimate left
    /// (the sender's side); the pause before the next stream counts from it.
    last_stream_end: Option<Instant>,
    /// Control round-trip time measured on the handshake, seconds.
    pub rtt_s: f64,
    pub server_addr: SocketAddr,
}

fn resolve(server: &str) -> Result<Vec<SocketAddr>> {
    let with_port = if server.parse::<SocketAddr>().is_ok() {
        server.to_string()
    } else if server.parse::<IpAddr>().is_ok() {
        // bare IPv6 or IPv4 address
        let ip: IpAddr = server.parse().unwrap();
        SocketAddr::new(ip, DEFAULT_PORT).to_string()
    } else if server.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        server.to_string()
    } else {
        format!("{server}:{DEFAULT_PORT}")
    };
    let addrs: Vec<SocketAddr> = with_port
        .to_socket_addrs()
        .map_err(|e| AbwError::Unreachable {
            addr: server.to_string(),
            source: e,
        })?
        .collect();
    if addrs.is_empty() {
        return Err(AbwError::Unreachable {
            addr: server.to_string(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no address"),
        });
    }
    Ok(addrs)
}

fn new_socket(cfg: &ClientConfig, dest: &SocketAddr, ty: Type) -> std::io::Result<Socket> {
    let proto = if ty == Type::STREAM {
        Protocol::TCP
    } else {
        Protocol::UDP
    };
    let s = Socket::new(Domain::for_address(*dest), ty, Some(proto))?;
    if let Some(dev) = &cfg.device {
        s.bind_device(Some(dev.as_bytes()))?;
    }
    if let Some(ip) = cfg.bind {
        s.bind(&SocketAddr::new(ip, 0).into())?;
    }
    Ok(s)
}

impl Session {
    /// Connect and handshake; errors are `Unreachable` or `ControlLost`.
    pub fn connect(cfg: ClientConfig) -> Result<Session> {
        tighten_timer_slack();
        let addrs = resolve(&cfg.server)?;
        let mut last = None;
        let mut tcp = None;
        for a in &addrs {
            let r = new_socket(&cfg, a, Type::STREAM)
                .and_then(|s| s.connect_timeout(&(*a).into(), cfg.connect_timeout).map(|_| s));
            match r {
                Ok(s) => {
                    tcp = Some((TcpStream::from(s), *a));
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let (tcp, server_addr) = tcp.ok_or_else(|| AbwError::Unreachable {
            addr: cfg.server.clone(),
            source: last.unwrap_or_else(|| std::io::Error::other("connect failed")),
        })?;
        let mut control = Control::new(tcp)?;
        let session = Rng::from_entropy().next_u64();
        let t0 = Instant::now();
        control.send(&Msg::Hello {
            version: VERSION,
            session,
            reverse: cfg.reverse,
        })?;
        let udp_port = match control.recv(cfg.timeout, "hello reply")? {
            Msg::HelloOk { udp_port, .. } => udp_port,
            Msg::Error { kind, message } => return Err(remote_error(&kind, message)),
            m => return Err(AbwError::Protocol(format!("unexpected reply to hello: {m:?}"))),
        };
        let rtt_s = t0.elapsed().as_secs_f64();
        let udp_dest = SocketAddr::new(server_addr.ip(), udp_port);
        let udp: UdpSocket = new_socket(&cfg, &udp_dest, Type::DGRAM)
            .and_then(|s| {
                if cfg.bind.is_none() {
                    let any: SocketAddr = if udp_dest.is_ipv4() {
                        "0.0.0.0:0".parse().unwrap()
                    } else {
                        "[::]:0".parse().unwrap()
                    };
                    s.bind(&any.into())?;
                }
                s.connect(&udp_dest.into())?;
                Ok(s.into())
            })
            .map_err(|e| AbwError::io("opening UDP probe socket", e))?;
        let collector = if cfg.reverse {
            let c = Collector::start(&udp)?;
            c.reset(session);
            Some(c)
        } else {
            None
        };
        Ok(Session {
            cfg,
            control,
            udp,
            collector,
            session,
            next_stream: 1,
            last_stream_end: None,
            rtt_s,
            server_addr,
        })
    }

    fn punch(&mut self) -> Result<()> {
        for _ in 0..3 {
            send_punch(&self.udp, self.session, 3)?;
            self.control.send(&Msg::Punch {})?;
            match self.control.recv(self.cfg.timeout, "punch reply")? {
                Msg::PunchOk { .. } => return Ok(()),
                Msg::Error { kind, .. } if kind == "no_probes" => continue,
                Msg::Error { kind, message } => return Err(remote_error(&kind, message)),
                m => return Err(AbwError::Protocol(format!("unexpected reply to punch: {m:?}"))),
            }
        }
        Err(AbwError::NoProbes(
            "server never received our UDP punch packets (UDP blocked?)".into(),
        ))
    }

    /// Execute one probe and return what was observed.
    fn probe(&mut self, spec: &ProbeSpec, c: &mut Counters) -> Result<Observation> {
        let id = self.next_stream;
        self.next_stream += 1;
        let wait = self.cfg.timeout + Duration::from_secs_f64(spec.duration_s()) + self.cfg.grace;
        let obs = if !self.cfg.reverse {
            let sent = send_stream(&self.udp, None, self.session, id, spec, self.cfg.spin)?;
            self.last_stream_end = Some(Instant::now());
            self.control.send(&Msg::StreamEnd {
                stream: id,
                sent: sent.packets,
                grace_ms: self.cfg.grace.as_millis() as u64,
            })?;
            match self.control.recv(wait, "stream report")? {
                Msg::StreamReport { stream, rx } if stream == id => Observation {
                    sent: sent.packets,
                    size: spec.size,
                    rx: rx
                        .into_iter()
                        .map(|[seq, send_ns, recv_ns]| Rx {
                            seq: seq as u32,
                            send_ns,
                            recv_ns,
                        })
                        .collect(),
                },
                Msg::Error { kind, message } => return Err(remote_error(&kind, message)),
                m => return Err(AbwError::Protocol(format!("unexpected reply: {m:?}"))),
            }
        } else {
            self.control.send(&Msg::SendStream {
                stream: id,
                size: spec.size,
                offsets_ns: spec.offsets_ns.clone(),
                spin_us: self.cfg.spin.as_micros() as u64,
            })?;
            let sent = match self.control.recv(wait, "stream_sent")? {
                Msg::StreamSent { stream, sent } if stream == id => sent,
                Msg::Error { kind, message } => return Err(remote_error(&kind, message)),
                m => return Err(AbwError::Protocol(format!("unexpected reply: {m:?}"))),
            };
            self.last_stream_end = Some(Instant::now());
            let col = self.collector.as_ref().expect("reverse session has a collector");
            let mut o = col.wait_stream(id, sent, self.cfg.grace, self.cfg.grace + Duration::from_secs(5));
            o.size = spec.size;
            o
        };
        c.streams += 1;
        c.packets_sent += obs.sent as u64;
        c.bytes_sent += obs.sent as u64 * spec.size as u64;
        c.packets_received += obs.rx.len() as u64;
        c.bytes_received += obs.rx.len() as u64 * spec.size as u64;
        // the lead-in costs bytes (counted above) but is not measured
        Ok(obs.without_lead(spec.lead))
    }

    /// Run one estimate with `method`.
    pub fn estimate(&mut self, method: &mut dyn Method) -> std::result::Result<Outcome, Failure> {
        let start_ns = realtime_ns();
        let t0 = Instant::now();
        let ctl0 = self.control.bytes_in + self.control.bytes_out;
        let mut c = Counters::default();
        let r = self.estimate_inner(method, &mut c);
        c.control_bytes = self.control.bytes_in + self.control.bytes_out - ctl0;
        match r {
            Ok(estimate) => Ok(Outcome {
                estimate,
                counters: c,
                start_ns,
                end_ns: realtime_ns(),
                latency_s: t0.elapsed().as_secs_f64(),
            }),
            Err(error) => Err(Failure { error, counters: c }),
        }
    }

    fn estimate_inner(&mut self, method: &mut dyn Method, c: &mut Counters) -> Result<Estimate> {
        if self.cfg.reverse {
            self.punch()?;
        }
        self.last_stream_end = None;
        loop {
            match method.next() {
                Step::Probe(spec) => {
                    // The pause is idle time of the path between streams
                    // (the queue drains, streams decorrelate); waiting for
                    // the previous stream's report was idle time already,
                    // so on long-RTT paths it is not paid twice.
                    let idle = self.last_stream_end.map_or(0.0, |t| t.elapsed().as_secs_f64());
                    sleep_s(spec.pause_s - idle);
                    let obs = self.probe(&spec, c)?;
                    method.observe(&spec, &obs);
                }
                Step::Done(e) => return Ok(e),
                Step::Fail(e) => return Err(e),
            }
        }
    }

    /// Close the session politely (errors ignored).
    pub fn close(mut self) {
        let _ = self.control.send(&Msg::Bye {});
    }

    /// Which clock stamped received packets (reverse mode): (kernel, user).
    pub fn timestamp_sources(&self) -> Option<(u64, u64)> {
        self.collector.as_ref().map(|c| c.timestamp_sources())
    }
}

/// Map an error reported by the peer to a local error.
pub fn remote_error(kind: &str, message: String) -> AbwError {
    match kind {
        "busy" => AbwError::Busy(message),
        "no_probes" => AbwError::NoProbes(message),
        "config" => AbwError::Config(message),
        _ => AbwError::Protocol(format!("server error ({kind}): {message}")),
    }
}
