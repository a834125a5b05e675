//! Estimation methods as pure state machines.
//!
//! A method never touches a socket: it asks for probes (`next` returns a
//! [`ProbeSpec`]: packet size, send offsets, pause before sending), is told
//! what each probe looked like at both ends (`observe` gets an
//! [`Observation`]: send/receive timestamps per sequence number), and
//! finally returns an [`Estimate`] or an error. The I/O layer (client,
//! server) executes the probes; unit tests feed synthetic observations.

pub mod bracket;
pub mod pathload;
pub mod spruce;
pub mod yaz;

use serde_json::Value;

use crate::error::AbwError;
use crate::observation::Observation;

/// One probe to send: `offsets_ns.len()` packets of `size` IP bytes, packet
/// `i` sent `offsets_ns[i]` ns after the first; preceded by `pause_s` idle.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeSpec {
    pub size: usize,
    pub offsets_ns: Vec<u64>,
    pub pause_s: f64,
    /// Nominal rate of the probe (IP bit/s), for logs.
    pub rate_bps: f64,
    /// The first `lead` packets are a lead-in, not part of the measured
    /// stream: the I/O layer sends them and drops them from the
    /// observation ([`Observation::without_lead`]).
    pub lead: usize,
}

impl ProbeSpec {
    /// A periodic stream of `n` packets at `rate_bps`.
    pub fn periodic(n: usize, size: usize, rate_bps: f64, pause_s: f64) -> ProbeSpec {
        let gap = size as f64 * 8.0 / rate_bps * 1e9;
        ProbeSpec {
            size,
            offsets_ns: (0..n).map(|i| (i as f64 * gap).round() as u64).collect(),
            pause_s,
            rate_bps,
            lead: 0,
        }
    }

    /// The same probe preceded by a lead-in of at least `lead_bytes`
    /// (whole packets of the probe's size) sent back to back, one probe
    /// gap before the first measured packet.
    ///
    /// Why: a token-bucket shaper (Linux tbf, an operator's policer) that
    /// has been idle holds a full bucket, and the first packets of a
    /// stream pass above the shaped rate while that burst drains. The
    /// queue then starts to build later than the stream, the stream's
    /// delay trend looks smaller than it is, and a rate above the
    /// available bandwidth reads as "below". The bias is the bucket's
    /// size relative to the stream's bytes: small at high rates, large at
    /// low ones (+11% at 1 Mbit/s with a 3 kB bucket in bench/abw, where
    /// streams are ~13 kB). Sending the lead back to back spends the
    /// burst before the measured packets; on a path without a bucket it
    /// only adds a small standing queue, which changes the delays'
    /// level, not their trend (the statistic the methods use). Source:
    /// ours, from bench/abw (RESULTS.md, "The 1 Mbit/s bias": a lead of
    /// ~3 kB, the size of the bench's tbf bucket, took the +11% at
    /// 1 Mbit/s / 200 ms RTT to about 0); the same burst effect is why the
    /// bench shapes with a two-frame bucket (bench/abw/README.md).
    pub fn with_lead(mut self, lead_bytes: usize) -> ProbeSpec {
        if lead_bytes == 0 || self.offsets_ns.is_empty() {
            return self;
        }
        let k = lead_bytes.div_ceil(self.size);
        let gap = if self.offsets_ns.len() > 1 {
            self.offsets_ns[1] - self.offsets_ns[0]
        } else {
            0
        };
        let mut offsets = vec![0u64; k];
        offsets.extend(self.offsets_ns.iter().map(|o| o + gap));
        self.offsets_ns = offsets;
        self.lead += k;
        self
    }

    /// Duration of the probe (first to last packet, lead included), seconds.
    pub fn duration_s(&self) -> f64 {
        self.offsets_ns.last().copied().unwrap_or(0) as f64 / 1e9
    }

    /// IP bytes the probe carries (lead included).
    pub fn bytes(&self) -> u64 {
        (self.size * self.offsets_ns.len()) as u64
    }
}

/// Final result of one estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Point estimate, IP bit/s.
    pub estimate_bps: f64,
    /// Range, where the method gives one.
    pub low_bps: Option<f64>,
    pub high_bps: Option<f64>,
    /// Method-specific details (decisions, grey region, ...).
    pub detail: Value,
}

/// What a method wants next.
#[derive(Debug)]
pub enum Step {
    Probe(ProbeSpec),
    Done(Estimate),
    Fail(AbwError),
}

/// An estimation method (one instance per estimate).
pub trait Method {
    /// Next action.
    fn next(&mut self) -> Step;
    /// Result of the probe last returned by `next`.
    fn observe(&mut self, spec: &ProbeSpec, obs: &Observation);
    /// Name and parameters, for the output record.
    fn name(&self) -> &'static str;
    fn params(&self) -> Value;
}

/// Shape of a rate-probing stream at `rate` (IP bit/s): keeps `n` packets of
/// `size` bytes unless the stream would last longer than `max_s`; then it
/// first shortens the stream down to `n_min` packets and then shrinks the
/// packets down to `size_min` bytes (at low rates only, where packet-rate
/// caps of gateways do not bite). Returns (packets, size).
pub fn stream_shape(
    rate: f64,
    n: usize,
    size: usize,
    n_min: usize,
    size_min: usize,
    max_s: f64,
) -> (usize, usize) {
    let n_min = n_min.min(n).max(2);
    let fits = |k: usize, s: usize| (k - 1) as f64 * s as f64 * 8.0 / rate <= max_s;
    if fits(n, size) {
        return (n, size);
    }
    let k = ((max_s * rate / (size as f64 * 8.0)).floor() as usize + 1).clamp(n_min, n);
    if fits(k, size) {
        return (k, size);
    }
    let s = ((max_s * rate / 8.0 / (n_min - 1) as f64).floor() as usize).clamp(size_min.min(size), size);
    (n_min, s)
}

/// Common rate bounds of the rate-probing methods.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateBounds {
    /// Lowest probing rate (IP bit/s); if even this congests the path the
    /// estimate fails with `link_too_slow`.
    pub min_bps: f64,
    /// Highest probing rate (IP bit/s); also the rate of the initial
    /// dispersion train.
    pub max_bps: f64,
}

/// Outcome of the initial packet train that bounds the search from above:
/// the dispersion rate (ADR, which lies between the available bandwidth and
/// the capacity) of a train sent at `max_bps`.
pub fn train_upper_bound(obs: &Observation) -> Option<f64> {
    obs.output_rate().filter(|r| r.is_finite() && *r > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_keeps_long_streams_at_high_rate() {
        assert_eq!(stream_shape(50e6, 50, 1400, 20, 200, 0.1), (50, 1400));
    }

    #[test]
    fn shape_shortens_then_shrinks() {
        // 4 Mbit/s: 50 x 1400 B would take 137 ms
        let (n, s) = stream_shape(4e6, 50, 1400, 20, 200, 0.1);
        assert_eq!(s, 1400);
        assert!((20..50).contains(&n));
        assert!((n - 1) as f64 * 1400.0 * 8.0 / 4e6 <= 0.1);
        // 0.3 Mbit/s: 20 packets of 1400 B would take 0.7 s
        let (n, s) = stream_shape(0.3e6, 50, 1400, 20, 200, 0.1);
        assert_eq!(n, 20);
        assert!((197..1400).contains(&s), "size {s}");
        // 10 kbit/s: bounded below by size_min
        assert_eq!(stream_shape(1e4, 50, 1400, 20, 200, 0.1), (20, 200));
    }

    #[test]
    fn lead_goes_first_back_to_back() {
        let p = ProbeSpec::periodic(3, 1250, 10e6, 0.0).with_lead(3000);
        assert_eq!(p.lead, 3);
        assert_eq!(p.offsets_ns, vec![0, 0, 0, 1_000_000, 2_000_000, 3_000_000]);
        assert_eq!(p.bytes(), 6 * 1250);
        let q = ProbeSpec::periodic(3, 1250, 10e6, 0.0).with_lead(0);
        assert_eq!((q.lead, q.offsets_ns.len()), (0, 3));
    }

    #[test]
    fn periodic_offsets() {
        let p = ProbeSpec::periodic(3, 1250, 10e6, 0.0);
        assert_eq!(p.offsets_ns, vec![0, 1_000_000, 2_000_000]);
        assert_eq!(p.bytes(), 3750);
        assert!((p.duration_s() - 0.002).abs() < 1e-12);
    }
}
