//! The forwarding loop: TUN devices in, the pure emulator in the middle,
//! TUN devices out, plus the state publisher.
//!
//! One thread serves both directions so that the radio state (promotion)
//! and the serving cell are shared without locks, and so that the whole
//! emulator fits on one core. It sleeps in `ppoll` until a packet arrives or
//! the next departure is due, with the timer slack lowered to 1 us so that
//! departures are not late by the default 50 us slack.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::clock::EpochClock;
use crate::emulator::{Direction, Emulator, EmulatorSpec};
use crate::link::LinkStats;
use crate::state::{serve_http, write_atomic, Delivered, LinkState, SharedState, FORMAT_VERSION};
use crate::tun::Tun;
use crate::{Error, Nanos, NS_PER_MS};

/// Largest packet read from a TUN device (its MTU cannot exceed this).
const MAX_PACKET: usize = 65_536;
/// Packets read from one device before serving departures again, so a
/// flood in one direction cannot starve the other.
const READ_BATCH: usize = 64;
/// Longest sleep, so that a stop request is seen promptly.
const MAX_SLEEP: Nanos = 100 * NS_PER_MS;

/// Set by SIGINT/SIGTERM.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Makes SIGINT and SIGTERM end `run` cleanly (final state and summary).
pub fn install_stop_handler() {
    // SAFETY: the handler only stores to an atomic, which is
    // async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub uplink_tun: String,
    pub downlink_tun: String,
    /// Where to publish the link state (atomically replaced).
    pub state_file: Option<PathBuf>,
    /// UDP address answering any datagram with the link state.
    pub state_udp: Option<SocketAddr>,
    /// TCP address serving the link state over HTTP (`GET /`).
    pub state_http: Option<SocketAddr>,
    /// Publication period; 200 ms by default (modem readers poll at 1 Hz or
    /// less, so 5 Hz keeps them within one sample of the truth).
    pub state_interval: Nanos,
    /// Stop after this long; run until signalled when `None`.
    pub duration: Option<Nanos>,
    /// Real-time scheduling priority (SCHED_FIFO 1-99), so that departures
    /// stay on time on a busy host; `None` keeps the normal scheduler.
    pub realtime_priority: Option<i32>,
}

/// Switches this thread to SCHED_FIFO at `priority`.
///
/// The loop sleeps whenever it has nothing due, so it cannot starve the
/// host; the kernel's RT throttling (95% of each second by default) is a
/// second safety net.
pub fn set_realtime(priority: i32) -> Result<(), Error> {
    let param = libc::sched_param {
        sched_priority: priority.clamp(1, 99),
    };
    // SAFETY: sched_setscheduler on this thread (pid 0) with a valid param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc < 0 {
        return Err(Error::Os {
            what: "switching to SCHED_FIFO (needs root or CAP_SYS_NICE)".into(),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// What a run did, printed as JSON when it ends.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub seconds: f64,
    pub uplink: LinkStats,
    pub downlink: LinkStats,
    pub write_errors: u64,
    /// How late timed wake-ups were: counts of wake-ups within 10 us, 100 us,
    /// 1 ms and beyond (a loaded host shows up here).
    pub wakeup_lateness: Lateness,
}

/// Histogram of timer lateness.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Lateness {
    pub within_10us: u64,
    pub within_100us: u64,
    pub within_1ms: u64,
    pub beyond_1ms: u64,
    pub max_us: u64,
}

impl Lateness {
    fn record(&mut self, late: Nanos) {
        match late {
            0..=10_000 => self.within_10us += 1,
            10_001..=100_000 => self.within_100us += 1,
            100_001..=1_000_000 => self.within_1ms += 1,
            _ => self.beyond_1ms += 1,
        }
        self.max_us = self.max_us.max(late / 1000);
    }
}

struct Publisher {
    file: Option<PathBuf>,
    http: Option<SharedState>,
    udp: Option<UdpSocket>,
    interval: Nanos,
    next: Nanos,
    last_t: Nanos,
    last_tx: (u64, u64),
    delivered: Delivered,
    epoch_monotonic_ns: u64,
}

impl Publisher {
    fn state(&mut self, em: &Emulator, now: Nanos) -> LinkState {
        let snapshot = em.snapshot(now);
        let tx = (snapshot.uplink.stats.tx_bytes, snapshot.downlink.stats.tx_bytes);
        let dt = now.saturating_sub(self.last_t);
        if dt >= self.interval / 2 && dt > 0 {
            let bps = |a: u64, b: u64| (a - b) as f64 * 8.0 * 1e9 / dt as f64;
            self.delivered = Delivered {
                uplink_bps: bps(tx.0, self.last_tx.0).round(),
                downlink_bps: bps(tx.1, self.last_tx.1).round(),
            };
            self.last_t = now;
            self.last_tx = tx;
        }
        LinkState {
            format_version: FORMAT_VERSION,
            time_unix_ms: chrono::Utc::now().timestamp_millis(),
            epoch_monotonic_ns: self.epoch_monotonic_ns,
            delivered: self.delivered,
            snapshot,
        }
    }

    fn publish(&mut self, em: &Emulator, now: Nanos) -> Result<(), Error> {
        self.next = now + self.interval;
        if self.file.is_none() && self.http.is_none() {
            return Ok(());
        }
        let json = self.state(em, now).to_json();
        if let Some(shared) = &self.http {
            if let Ok(mut s) = shared.lock() {
                s.clone_from(&json);
            }
        }
        if let Some(path) = &self.file {
            write_atomic(path, &json)?;
        }
        Ok(())
    }

    fn answer(&mut self, em: &Emulator, now: Nanos) {
        let mut buf = [0u8; 512];
        let Some(sock) = self.udp.as_ref() else { return };
        let mut peers = Vec::new();
        while let Ok((_, peer)) = sock.recv_from(&mut buf) {
            peers.push(peer);
        }
        for peer in peers {
            let json = self.state(em, now).to_json();
            if let Some(sock) = self.udp.as_ref() {
                // A reader that went away is not our problem.
                let _ = sock.send_to(json.as_bytes(), peer);
            }
        }
    }
}

fn os(what: &str) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::Os {
        what: what.to_owned(),
        source,
    }
}

/// Forwards packets through the emulator until the duration ends or a stop
/// signal arrives.
pub fn run(spec: EmulatorSpec, opts: &RunOptions) -> Result<RunSummary, Error> {
    if opts.uplink_tun == opts.downlink_tun {
        return Err(Error::Profile(
            "uplink and downlink need two different TUN devices".into(),
        ));
    }
    // SAFETY: prctl with PR_SET_TIMERSLACK only changes this thread's timer
    // slack (1000 ns instead of the default 50 us).
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
    let mut tuns = [Tun::open(&opts.uplink_tun)?, Tun::open(&opts.downlink_tun)?];
    let dirs = [Direction::Uplink, Direction::Downlink];
    let udp = match opts.state_udp {
        Some(addr) => {
            let s = UdpSocket::bind(addr).map_err(os("binding the state UDP port"))?;
            s.set_nonblocking(true).map_err(os("configuring the state UDP port"))?;
            Some(s)
        }
        None => None,
    };
    let http = match opts.state_http {
        Some(addr) => {
            let listener = std::net::TcpListener::bind(addr).map_err(os("binding the state HTTP port"))?;
            let shared: SharedState = Default::default();
            let s2 = std::sync::Arc::clone(&shared);
            std::thread::Builder::new()
                .name("state-http".into())
                .spawn(move || serve_http(listener, s2))
                .map_err(os("starting the state HTTP thread"))?;
            Some(shared)
        }
        None => None,
    };
    // After spawning the HTTP thread, which must not inherit the priority.
    if let Some(p) = opts.realtime_priority {
        set_realtime(p)?;
    }
    let clock = EpochClock::start();
    let mut em = Emulator::new(spec);
    let mut publisher = Publisher {
        file: opts.state_file.clone(),
        http,
        udp,
        interval: opts.state_interval.max(NS_PER_MS),
        next: 0,
        last_t: 0,
        last_tx: (0, 0),
        delivered: Delivered::default(),
        epoch_monotonic_ns: clock.epoch_monotonic_ns(),
    };
    let mut buf = vec![0u8; MAX_PACKET];
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(READ_BATCH);
    let mut write_errors = 0u64;
    let mut lateness = Lateness::default();
    let mut fds = [
        libc::pollfd {
            fd: tuns[0].as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: tuns[1].as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: publisher.udp.as_ref().map_or(-1, |s| s.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        let now = clock.now();
        if STOP.load(Ordering::SeqCst) || opts.duration.is_some_and(|d| now >= d) {
            break;
        }
        for (i, dir) in dirs.iter().enumerate() {
            em.poll(*dir, now, &mut out);
            for p in out.drain(..) {
                if tuns[i].send(&p).is_err() {
                    write_errors += 1;
                }
            }
        }
        if now >= publisher.next {
            publisher.publish(&em, now)?;
        }
        let wake = em
            .next_wakeup()
            .unwrap_or(Nanos::MAX)
            .min(publisher.next)
            .min(now + MAX_SLEEP);
        let wait = wake.saturating_sub(clock.now());
        if wait > 0 {
            let ts = libc::timespec {
                tv_sec: (wait / 1_000_000_000) as libc::time_t,
                tv_nsec: (wait % 1_000_000_000) as libc::c_long,
            };
            // SAFETY: `fds` is a valid array of 3 pollfd; a negative fd is
            // ignored by the kernel; no signal mask change.
            let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as _, &ts, std::ptr::null()) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(os("waiting for packets")(e));
                }
                continue;
            }
            if rc == 0 {
                if wake < publisher.next.min(now + MAX_SLEEP) {
                    lateness.record(clock.now().saturating_sub(wake));
                }
                continue;
            }
        }
        let now = clock.now();
        for (i, dir) in dirs.iter().enumerate() {
            for _ in 0..READ_BATCH {
                match tuns[i].recv(&mut buf) {
                    Ok(n) if n > 0 => {
                        em.on_packet(*dir, now, buf[..n].to_vec());
                    }
                    Ok(_) => break,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => break,
                    Err(e) => return Err(os("reading a TUN device")(e)),
                }
            }
        }
        if fds[2].revents != 0 {
            publisher.answer(&em, now);
        }
        for f in &mut fds {
            f.revents = 0;
        }
    }
    let now = clock.now();
    publisher.publish(&em, now)?;
    Ok(RunSummary {
        seconds: now as f64 / 1e9,
        uplink: em.link(Direction::Uplink).stats(),
        downlink: em.link(Direction::Downlink).stats(),
        write_errors,
        wakeup_lateness: lateness,
    })
}
