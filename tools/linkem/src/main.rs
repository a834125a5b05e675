//! `linkem`: command-line front end of the link emulator.
//!
//! `linkem run` forwards between two TUN devices with a profile's
//! behaviour; `linkem check` validates profiles; `linkem probe ...` are the
//! traffic tools used by the tests and the bench.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use linkem::probe;
use linkem::profile::{Overrides, Profile};
use linkem::runner::{self, RunOptions};
use linkem::{NS_PER_MS, NS_PER_S};

#[derive(Parser)]
#[command(name = "linkem", version, about = "User-space cellular link emulator between TUN devices")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Forward packets between the uplink and downlink TUN devices.
    Run(RunArgs),
    /// Validate profiles and print what they resolve to.
    Check {
        /// Profile files.
        #[arg(required = true)]
        profiles: Vec<PathBuf>,
    },
    /// Traffic tools for tests and benchmarks.
    #[command(subcommand)]
    Probe(ProbeCommand),
}

#[derive(Args)]
struct RunArgs {
    /// Link profile (YAML).
    #[arg(long)]
    profile: PathBuf,
    /// TUN device that the kernel routes node->network traffic into.
    #[arg(long, default_value = "lkup")]
    uplink_tun: String,
    /// TUN device that the kernel routes network->node traffic into.
    #[arg(long, default_value = "lkdn")]
    downlink_tun: String,
    /// Publish the link state (JSON) to this file, replaced atomically.
    #[arg(long)]
    state_file: Option<PathBuf>,
    /// Answer any UDP datagram on this address with the link state.
    #[arg(long)]
    state_udp: Option<SocketAddr>,
    /// Serve the link state over HTTP on this address (GET /).
    #[arg(long)]
    state_http: Option<SocketAddr>,
    /// State publication period.
    #[arg(long, default_value_t = 200)]
    state_interval_ms: u64,
    /// Stop after this many seconds (default: until SIGINT/SIGTERM).
    #[arg(long)]
    duration_s: Option<f64>,
    /// Run with real-time priority (SCHED_FIFO, 1-99) so that departures
    /// stay on time on a loaded host; needs root or CAP_SYS_NICE.
    #[arg(long)]
    realtime: Option<i32>,
    /// Override the profile's random seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Override the diurnal time compression (240: a day in 6 minutes).
    #[arg(long)]
    compression: Option<f64>,
    /// Override the local hour at start (diurnal profiles).
    #[arg(long, conflicts_with = "diurnal_anchor")]
    start_hour: Option<f64>,
    /// Run the diurnal clock compressed from this instant (RFC 3339, e.g.
    /// 2026-11-24T00:00:00Z), as a campaign with the same time_scale and
    /// time_anchor does, so both see the same local hours.
    #[arg(long)]
    diurnal_anchor: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Subcommand)]
enum ProbeCommand {
    /// Receive UDP and print bytes per bin as JSON.
    Sink {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, default_value_t = 10.0)]
        duration_s: f64,
        #[arg(long, default_value_t = 1000)]
        bin_ms: u64,
        /// Bin origin as CLOCK_MONOTONIC ns (e.g. the emulator's epoch).
        #[arg(long)]
        origin_ns: Option<u64>,
        /// Stop once nothing arrived for this long after the first packet.
        #[arg(long, default_value_t = 2.0)]
        quiet_s: f64,
    },
    /// Send UDP datagrams, paced or as fast as possible.
    Flood {
        #[arg(long)]
        to: SocketAddr,
        /// UDP payload bytes (IP packet = payload + 28).
        #[arg(long, default_value_t = 1472)]
        payload: usize,
        /// Packets per second (default: unpaced).
        #[arg(long, conflicts_with = "rate_bps")]
        pps: Option<f64>,
        /// Bits per second of IP packets.
        #[arg(long)]
        rate_bps: Option<f64>,
        #[arg(long, default_value_t = 5.0)]
        duration_s: f64,
    },
    /// Serve sized TCP transfers.
    TcpServe {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, default_value_t = 60.0)]
        duration_s: f64,
    },
    /// Back-to-back TCP downloads from `tcp-serve`.
    Fetch {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        size: u64,
        #[arg(long, default_value_t = 5)]
        count: usize,
    },
    /// Echo UDP datagrams.
    Echo {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, default_value_t = 60.0)]
        duration_s: f64,
    },
    /// Ask a `linkem run --state-udp` endpoint for the link state.
    State {
        #[arg(long)]
        to: SocketAddr,
        /// Ask the HTTP endpoint (`--state-http`) instead of the UDP one.
        #[arg(long)]
        http: bool,
    },
    /// UDP round trips to `echo`.
    Ping {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long, default_value_t = 1472)]
        payload: usize,
        #[arg(long, default_value_t = 1000)]
        count: usize,
        #[arg(long, default_value_t = 2.0)]
        interval_ms: f64,
    },
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

fn print_json<T: serde::Serialize>(v: &T) -> Result<()> {
    println!("{}", serde_json::to_string(v).context("serialising the report")?);
    Ok(())
}

fn load(path: &Path) -> Result<Profile> {
    Profile::load(path).with_context(|| format!("loading profile {}", path.display()))
}

fn dir_of(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn run(a: RunArgs) -> Result<()> {
    let profile = load(&a.profile)?;
    let overrides = Overrides {
        seed: a.seed,
        compression: a.compression,
        start_hour: a.start_hour,
        anchor: a.diurnal_anchor,
    };
    let spec = profile
        .build(&dir_of(&a.profile), chrono::Utc::now(), &overrides)
        .with_context(|| format!("building the link from {}", a.profile.display()))?;
    let opts = RunOptions {
        uplink_tun: a.uplink_tun,
        downlink_tun: a.downlink_tun,
        state_file: a.state_file,
        state_udp: a.state_udp,
        state_http: a.state_http,
        state_interval: a.state_interval_ms * NS_PER_MS,
        duration: a.duration_s.map(|s| (s.max(0.0) * NS_PER_S as f64) as u64),
        realtime_priority: a.realtime,
    };
    runner::install_stop_handler();
    let summary = runner::run(spec, &opts).with_context(|| {
        format!(
            "forwarding between TUN devices {} and {}",
            opts.uplink_tun, opts.downlink_tun
        )
    })?;
    print_json(&summary)
}

fn check(profiles: &[PathBuf]) -> Result<()> {
    for path in profiles {
        let p = load(path)?;
        p.build(&dir_of(path), chrono::Utc::now(), &Overrides::default())
            .with_context(|| format!("checking {}", path.display()))?;
        println!(
            "ok {} ({} {} {}, {})",
            path.display(),
            p.operator.country,
            p.operator.name,
            p.operator.mcc_mnc,
            p.rat
        );
    }
    Ok(())
}

fn probe(cmd: ProbeCommand) -> Result<()> {
    match cmd {
        ProbeCommand::Sink {
            listen,
            duration_s,
            bin_ms,
            origin_ns,
            quiet_s,
        } => print_json(
            &probe::sink(listen, secs(duration_s), bin_ms.max(1), origin_ns, secs(quiet_s))
                .with_context(|| format!("receiving on {listen}"))?,
        ),
        ProbeCommand::Flood {
            to,
            payload,
            pps,
            rate_bps,
            duration_s,
        } => {
            let pps = pps.or(rate_bps.map(|r| r / 8.0 / (payload + probe::UDP_IPV4_OVERHEAD) as f64));
            print_json(&probe::flood(to, payload, pps, secs(duration_s)).with_context(|| format!("sending to {to}"))?)
        }
        ProbeCommand::TcpServe { listen, duration_s } => {
            probe::tcp_serve(listen, secs(duration_s)).with_context(|| format!("serving on {listen}"))
        }
        ProbeCommand::Fetch { to, size, count } => print_json(
            &probe::fetch(to, size, count, Duration::from_secs(30)).with_context(|| format!("fetching from {to}"))?,
        ),
        ProbeCommand::State { to, http } => {
            let text = probe::query_state(to, http, Duration::from_secs(2)).with_context(|| format!("asking {to} for the link state"))?;
            println!("{text}");
            Ok(())
        }
        ProbeCommand::Echo { listen, duration_s } => {
            probe::echo(listen, secs(duration_s)).with_context(|| format!("echoing on {listen}"))?;
            Ok(())
        }
        ProbeCommand::Ping {
            to,
            payload,
            count,
            interval_ms,
        } => print_json(
            &probe::ping(to, payload, count, secs(interval_ms / 1000.0)).with_context(|| format!("pinging {to}"))?,
        ),
    }
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Run(a) => run(a),
        Command::Check { profiles } => check(&profiles),
        Command::Probe(p) => probe(p),
    }
}
