//! `abw`: available-bandwidth estimator.
//!
//! `abw recv` runs the server (measurement server side); `abw send` runs a
//! client session (node side): uplink by default (the client sends the
//! probes), `--reverse` to have the server send them. One JSON record per
//! estimate on stdout; errors as `{"type":"error","error":..,"kind":..}`
//! with a non-zero exit status.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand, ValueEnum};

use abw::client::{ClientConfig, Session, DEFAULT_PORT};
use abw::error::AbwError;
use abw::method::pathload::{Pathload, PathloadConfig};
use abw::method::spruce::{Spruce, SpruceConfig};
use abw::method::yaz::{Yaz, YazConfig};
use abw::method::{Method, RateBounds};
use abw::record::{error_record, estimate_record, parse_rate, Context};
use abw::rng::Rng;
use abw::server::{serve, ServerConfig};

#[derive(Parser)]
#[command(name = "abw", version, about = "Available-bandwidth estimator (yaz, pathload, spruce)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Client (node side): measure towards a server; uplink unless --reverse.
    #[command(visible_alias = "client")]
    Send(Box<SendArgs>),
    /// Server (measurement server side): serve sessions one after another.
    #[command(visible_alias = "server")]
    Recv(RecvArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum MethodName {
    Yaz,
    Pathload,
    Spruce,
}

#[derive(Args)]
struct RecvArgs {
    /// TCP control + UDP probe address.
    #[arg(long, default_value_t = SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)))]
    listen: SocketAddr,
    /// End a session after this many silent seconds.
    #[arg(long, default_value_t = 60.0)]
    idle_timeout: f64,
    /// Upper bound of the pacer's busy-wait window for reverse streams (us).
    #[arg(long, default_value_t = 500)]
    max_spin_us: u64,
    /// Serve a single session, then exit.
    #[arg(long)]
    once: bool,
}

#[derive(Args)]
struct SendArgs {
    /// Server host or address, optionally host:port (default port 7351).
    #[arg(long, short = 's')]
    server: String,
    /// Reverse direction: the server sends, this client receives.
    #[arg(long)]
    reverse: bool,
    /// Estimation method.
    #[arg(long, short = 'm', value_enum, default_value_t = MethodName::Yaz)]
    method: MethodName,
    /// Number of estimates (ignored with --duration).
    #[arg(long, short = 'n', default_value_t = 1)]
    count: u64,
    /// Produce estimates for this many seconds instead of --count.
    #[arg(long, short = 'd')]
    duration: Option<f64>,
    /// Mean pause between consecutive estimates, exponentially distributed
    /// (yaz: 10x the inter-stream pause).
    #[arg(long, default_value_t = 500.0)]
    estimate_pause_ms: f64,
    /// Probe IP packet size in bytes (large probes: gateways cap packets/s).
    #[arg(long, default_value_t = 1400)]
    size: usize,
    /// Smallest packet size used to keep low-rate streams short.
    #[arg(long, default_value_t = 200)]
    min_size: usize,
    /// Lowest probing rate; below it the estimate fails as link_too_slow.
    #[arg(long, default_value = "100k", value_parser = parse_rate)]
    min_rate: f64,
    /// Highest probing rate (and rate of the initial dispersion train).
    #[arg(long, default_value = "1G", value_parser = parse_rate)]
    max_rate: f64,
    /// Packets per stream (yaz 50, pathload 100).
    #[arg(long)]
    stream_len: Option<usize>,
    /// Longest stream at low rates, seconds (yaz 0.1, pathload 0.2).
    #[arg(long)]
    max_stream_s: Option<f64>,
    /// Bracket resolution relative to its upper end (yaz, pathload).
    #[arg(long, default_value_t = 0.05)]
    resolution: f64,
    /// yaz: spacing-distortion threshold zeta (default: YazConfig's).
    #[arg(long)]
    zeta: Option<f64>,
    /// yaz: multiple of a stream's own trend noise added to zeta
    /// (default: YazConfig's).
    #[arg(long)]
    significance: Option<f64>,
    /// yaz: also count stream compression as congestion (yaz's rule).
    #[arg(long)]
    compression: bool,
    /// yaz: length factor of the streams probing a narrow bracket
    /// (default: YazConfig's).
    #[arg(long)]
    fine_factor: Option<f64>,
    /// yaz: mean pause between streams, ms (exponential).
    #[arg(long, default_value_t = 50.0)]
    pause_ms: f64,
    /// Packets of the initial dispersion train.
    #[arg(long, default_value_t = 30)]
    train_len: usize,
    /// yaz: probe-byte budget of one estimate (IP bytes; default:
    /// YazConfig's).
    #[arg(long)]
    max_bytes: Option<u64>,
    /// yaz: bytes sent back to back ahead of every stream and train, not
    /// measured (spend a token-bucket shaper's burst first; 0: none;
    /// default: YazConfig's).
    #[arg(long)]
    lead_bytes: Option<usize>,
    /// yaz: the lead is at least this multiple of the streams' mean trend
    /// noise times the stream's bytes (0: fixed lead; default:
    /// YazConfig's).
    #[arg(long)]
    lead_noise_factor: Option<f64>,
    /// yaz: plain bisection of the rate instead of the guided search.
    #[arg(long)]
    bisect: bool,
    /// yaz: re-test rounds per estimate at most (default: YazConfig's).
    #[arg(long)]
    max_retests: Option<usize>,
    /// yaz: streams at one rate that one decision may pool when their
    /// readings are noisy and unclear; 1 disables pooling (default:
    /// YazConfig's).
    #[arg(long)]
    pool_max: Option<usize>,
    /// yaz: longest extra pause that lets the probes' own queue drain
    /// before the next stream, ms; 0 disables it (default: YazConfig's).
    #[arg(long)]
    max_drain_ms: Option<f64>,
    /// pathload: streams per fleet.
    #[arg(long, default_value_t = 12)]
    fleet_len: usize,
    /// pathload: idle time between streams as a multiple of stream duration.
    #[arg(long, default_value_t = 9.0)]
    idle_factor: f64,
    /// spruce: bottleneck capacity (required for spruce).
    #[arg(long, value_parser = parse_rate)]
    capacity: Option<f64>,
    /// spruce: number of packet pairs.
    #[arg(long, default_value_t = 100)]
    pairs: usize,
    /// spruce: average probe load as a fraction of the capacity.
    #[arg(long, default_value_t = 0.05)]
    load: f64,
    /// TCP connect timeout, seconds.
    #[arg(long, default_value_t = 5.0)]
    connect_timeout: f64,
    /// Timeout of every control reply, seconds (plus the probe's duration).
    #[arg(long, default_value_t = 10.0)]
    timeout: f64,
    /// Wait for missing packets this long after the last arrival, ms.
    #[arg(long, default_value_t = 100)]
    grace_ms: u64,
    /// Pacer busy-wait window before each packet, microseconds.
    #[arg(long, default_value_t = 150)]
    spin_us: u64,
    /// Local address for both sockets (select the modem interface).
    #[arg(long)]
    bind: Option<IpAddr>,
    /// Interface for both sockets (SO_BINDTODEVICE; root).
    #[arg(long)]
    device: Option<String>,
    /// Seed of the pause randomisation (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
}

fn emit(v: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn make_method(a: &SendArgs, rng: Rng, rtt_s: f64) -> Result<Box<dyn Method>, AbwError> {
    if a.size < abw::packet::MIN_PACKET_SIZE || a.size > abw::packet::MAX_PACKET_SIZE {
        return Err(AbwError::Config(format!(
            "--size must be within {}..={} bytes",
            abw::packet::MIN_PACKET_SIZE,
            abw::packet::MAX_PACKET_SIZE
        )));
    }
    if a.min_rate >= a.max_rate {
        return Err(AbwError::Config("--min-rate must be below --max-rate".into()));
    }
    let bounds = RateBounds {
        min_bps: a.min_rate,
        max_bps: a.max_rate,
    };
    let min_size = a.min_size.clamp(abw::packet::MIN_PACKET_SIZE, a.size);
    Ok(match a.method {
        MethodName::Yaz => {
            let d = YazConfig::default();
            Box::new(Yaz::new(
                YazConfig {
                    size: a.size,
                    stream_len: a.stream_len.unwrap_or(d.stream_len).max(2),
                    min_size,
                    max_stream_s: a.max_stream_s.unwrap_or(d.max_stream_s),
                    mean_pause_s: a.pause_ms / 1e3,
                    zeta: a.zeta.unwrap_or(d.zeta),
                    significance: a.significance.unwrap_or(d.significance),
                    fine_factor: a.fine_factor.unwrap_or(d.fine_factor),
                    compression: a.compression,
                    resolution: a.resolution,
                    train_len: a.train_len.max(2),
                    max_bytes: a.max_bytes.unwrap_or(d.max_bytes),
                    lead_bytes: a.lead_bytes.unwrap_or(d.lead_bytes),
                    lead_noise_factor: a.lead_noise_factor.unwrap_or(d.lead_noise_factor),
                    guided: !a.bisect,
                    max_retests: a.max_retests.unwrap_or(d.max_retests),
                    pool_max: a.pool_max.unwrap_or(d.pool_max).max(1),
                    max_drain_s: a.max_drain_ms.map_or(d.max_drain_s, |ms| ms.max(0.0) / 1e3),
                    bounds,
                    ..d
                },
                rng,
            ))
        }
        MethodName::Pathload => {
            let d = PathloadConfig::default();
            Box::new(Pathload::new(PathloadConfig {
                size: a.size,
                stream_len: a.stream_len.unwrap_or(d.stream_len).max(9),
                min_size,
                max_stream_s: a.max_stream_s.unwrap_or(d.max_stream_s),
                fleet_len: a.fleet_len.max(1),
                idle_factor: a.idle_factor,
                resolution: a.resolution,
                train_len: a.train_len.max(2),
                rtt_s,
                bounds,
                ..d
            }))
        }
        MethodName::Spruce => Box::new(Spruce::new(
            SpruceConfig {
                capacity_bps: a.capacity.unwrap_or(f64::NAN),
                size: a.size,
                pairs: a.pairs,
                load: a.load,
            },
            rng,
        )?),
    })
}

fn method_label(m: MethodName) -> &'static str {
    match m {
        MethodName::Yaz => "yaz",
        MethodName::Pathload => "pathload",
        MethodName::Spruce => "spruce",
    }
}

fn run_send(a: SendArgs) -> ExitCode {
    let mut rng = a.seed.map(Rng::new).unwrap_or_else(Rng::from_entropy);
    // validate parameters before touching the network
    if let Err(e) = make_method(&a, rng.clone(), 0.0) {
        emit(&error_record(&e.to_string(), e.kind(), None, None, None));
        return ExitCode::from(2);
    }
    let cfg = ClientConfig {
        server: a.server.clone(),
        reverse: a.reverse,
        connect_timeout: Duration::from_secs_f64(a.connect_timeout.max(0.001)),
        timeout: Duration::from_secs_f64(a.timeout.max(0.001)),
        grace: Duration::from_millis(a.grace_ms.max(1)),
        spin: Duration::from_micros(a.spin_us),
        bind: a.bind,
        device: a.device.clone(),
    };
    let mut session = match Session::connect(cfg) {
        Ok(s) => s,
        Err(e) => {
            emit(&error_record(&e.to_string(), e.kind(), None, None, None));
            return ExitCode::from(1);
        }
    };
    let server = session.server_addr.to_string();
    let started = Instant::now();
    let mut latencies: Vec<f64> = Vec::new();
    let mut index = 0u64;
    loop {
        match a.duration {
            Some(d) => {
                let expect = latencies.iter().copied().fold(0.0, f64::max);
                if started.elapsed().as_secs_f64() + expect > d || (index > 0 && started.elapsed().as_secs_f64() >= d) {
                    break;
                }
            }
            None => {
                if index >= a.count {
                    break;
                }
            }
        }
        if index > 0 {
            abw::clock::sleep_s(rng.exponential(a.estimate_pause_ms / 1e3));
        }
        let seed = rng.next_u64();
        let mut method = match make_method(&a, Rng::new(seed), session.rtt_s) {
            Ok(m) => m,
            Err(e) => {
                emit(&error_record(&e.to_string(), e.kind(), Some(index), None, None));
                return ExitCode::from(2);
            }
        };
        let ctx = Context {
            method: method_label(a.method),
            params: method.params(),
            reverse: a.reverse,
            server: &server,
            rtt_s: Some(session.rtt_s),
        };
        match session.estimate(method.as_mut()) {
            Ok(o) => {
                latencies.push(o.latency_s);
                emit(&estimate_record(index, &ctx, &o));
            }
            Err(f) => {
                emit(&error_record(
                    &f.error.to_string(),
                    f.error.kind(),
                    Some(index),
                    Some(&ctx),
                    Some(&f.counters),
                ));
                return ExitCode::from(1);
            }
        }
        index += 1;
    }
    session.close();
    ExitCode::SUCCESS
}

fn run_recv(a: RecvArgs) -> anyhow::Result<()> {
    serve(ServerConfig {
        listen: a.listen,
        idle_timeout: Duration::from_secs_f64(a.idle_timeout.max(0.1)),
        max_spin: Duration::from_micros(a.max_spin_us),
        once: a.once,
    })
    .with_context(|| format!("serving on {}", a.listen))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Send(a) => run_send(*a),
        Cmd::Recv(a) => match run_recv(a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                let kind = e
                    .downcast_ref::<AbwError>()
                    .map(|x| x.kind())
                    .unwrap_or("io");
                emit(&error_record(&format!("{e:#}"), kind, None, None, None));
                ExitCode::from(1)
            }
        },
    }
}
