//! Bench helper: UDP cross traffic of known rate and a sink that logs the
//! delivered bytes in time bins (the ground truth of bench/abw).
//!
//! `abw-cross send --to ADDR --rate 8M --size 1000 --process poisson --duration 30 [--bin-ms 10]`
//! `abw-cross sink --listen ADDR --bin-ms 10 --duration 35`
//! The sink prints one JSON object at the end (of `--duration`, or on
//! SIGTERM/SIGINT): `{"bin_ms":..,"t0_ns":..,
//! "bytes":[..]}` with IP bytes (payload + 28) delivered per bin, bins
//! starting at `t0_ns` (CLOCK_REALTIME, user-space receive time). With
//! `--bin-ms` the sender prints the same object for the bytes it sent
//! (stamped right after each successful send): what was offered to the
//! bottleneck, unshifted by the queueing the probes cause.
//! The sender paces by sleeping only (no spinning, to leave the CPU to the
//! estimator under test); after a wake-up more than 2 ms late it skips the
//! missed slots rather than bursting them, so scheduler hiccups do not turn
//! constant traffic into bursts (the delivered rate, which the sink
//! measures, is the ground truth either way).

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};

use abw::clock::{realtime_ns, tighten_timer_slack};
use abw::record::parse_rate;
use abw::rng::Rng;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

#[derive(Parser)]
#[command(name = "abw-cross", about = "Cross traffic generator and sink for the abw bench")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Process {
    Const,
    Poisson,
}

#[derive(Subcommand)]
enum Cmd {
    /// Send UDP at a given IP-level rate.
    Send {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long, value_parser = parse_rate)]
        rate: f64,
        /// IP packet size, bytes.
        #[arg(long, default_value_t = 1000)]
        size: usize,
        #[arg(long, value_enum, default_value_t = Process::Const)]
        process: Process,
        #[arg(long)]
        duration: f64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Log the sent bytes in bins of this many ms and print them at
        /// the end (as the sink does); 0: no log.
        #[arg(long, default_value_t = 0)]
        bin_ms: u64,
    },
    /// Count delivered UDP bytes per bin.
    Sink {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, default_value_t = 10)]
        bin_ms: u64,
        #[arg(long)]
        duration: f64,
    },
}

fn install_stop_handler() {
    // SAFETY: the handler only stores into an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
}

/// IP bytes per time bin since a start time.
struct Bins {
    bin_ms: u64,
    bytes: Vec<u64>,
}

impl Bins {
    /// Bins of `bin_ms` covering `duration` seconds; `None` for `bin_ms` 0.
    fn new(bin_ms: u64, duration: f64) -> Option<Bins> {
        (bin_ms > 0).then(|| Bins {
            bin_ms,
            bytes: vec![0; ((duration * 1e3) as u64 / bin_ms + 1) as usize],
        })
    }

    fn add(&mut self, since_start_ns: u64, n: u64) {
        let i = (since_start_ns / (self.bin_ms * 1_000_000)) as usize;
        if let Some(b) = self.bytes.get_mut(i) {
            *b += n;
        }
    }

    fn json(&self, t0_ns: u64) -> serde_json::Value {
        serde_json::json!({"bin_ms": self.bin_ms, "t0_ns": t0_ns, "bytes": self.bytes})
    }
}

fn main() -> anyhow::Result<()> {
    tighten_timer_slack();
    match Cli::parse().cmd {
        Cmd::Send { to, rate, size, process, duration, seed, bin_ms } => {
            if size < 64 {
                bail!("size must be >= 64");
            }
            install_stop_handler();
            let t0 = realtime_ns();
            let mut log = Bins::new(bin_ms, duration);
            let sock = UdpSocket::bind("0.0.0.0:0").context("binding UDP")?;
            sock.connect(to).with_context(|| format!("connecting to {to}"))?;
            let buf = vec![0u8; size - 28];
            let mut rng = Rng::new(seed);
            let mean = size as f64 * 8.0 / rate;
            let start = Instant::now();
            let end = start + Duration::from_secs_f64(duration);
            let mut t = 0.0f64;
            loop {
                let due = start + Duration::from_secs_f64(t);
                if due >= end || STOP.load(Ordering::SeqCst) {
                    break;
                }
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                } else if now - due > Duration::from_millis(2) {
                    // Woke up late (CPU contention): skip the missed slots
                    // instead of bursting them out; the sink measures what
                    // was really delivered.
                    t = (now - start).as_secs_f64();
                }
                // ENOBUFS etc.: a dropped packet, not logged
                if sock.send(&buf).is_ok() {
                    if let Some(b) = log.as_mut() {
                        b.add(realtime_ns().saturating_sub(t0), size as u64);
                    }
                }
                t += match process {
                    Process::Const => mean,
                    Process::Poisson => rng.exponential(mean),
                };
            }
            if let Some(b) = log {
                println!("{}", b.json(t0));
            }
        }
        Cmd::Sink { listen, bin_ms, duration } => {
            install_stop_handler();
            let sock = UdpSocket::bind(listen).with_context(|| format!("binding {listen}"))?;
            sock.set_read_timeout(Some(Duration::from_millis(20)))?;
            let t0 = realtime_ns();
            let mut bins = Bins::new(bin_ms.max(1), duration).expect("bin_ms >= 1");
            let mut buf = vec![0u8; 65536];
            let end = Instant::now() + Duration::from_secs_f64(duration);
            while Instant::now() < end && !STOP.load(Ordering::SeqCst) {
                if let Ok(n) = sock.recv(&mut buf) {
                    bins.add(realtime_ns().saturating_sub(t0), n as u64 + 28);
                }
            }
            println!("{}", bins.json(t0));
        }
    }
    Ok(())
}
