//! Spruce-like probe-gap model (PGM).
//!
//! After Strauss, Katabi, Kaashoek, "A measurement study of available
//! bandwidth estimation tools" (IMC 2003): send `pairs` = 100 packet pairs
//! whose intra-pair gap Δin equals the packet's transmission time at the
//! bottleneck capacity C (Δin = L/C), pairs separated by exponentially
//! distributed gaps (Poisson sampling). Every pair whose gap grew to Δout
//! saw C·(Δout - Δin) bits of cross traffic in Δin, so
//! A_i = C·(1 - (Δout - Δin)/Δin); the estimate is the mean over pairs,
//! clamped to [0, C]. The capacity must be given (`--capacity`).
//!
//! Defaults: 100 pairs and 1500-byte probes in the paper (here the common
//! `--size`, 1400 by default); the inter-pair mean is chosen so the probe
//! load averages `load` = 5% of C, as spruce limits its own intrusiveness
//! (spruce additionally caps at 240 kbit/s, which at 100 Mbit/s would make
//! one estimate last ~10 s; we keep only the relative cap).
//! We use the measured send gap of each pair instead of the nominal Δin,
//! so send-side jitter does not count as cross traffic; pairs with a lost
//! or reordered packet, or sent more than 10% off Δin, are skipped.

use serde_json::{json, Value};

use super::{Estimate, Method, ProbeSpec, Step};
use crate::error::AbwError;
use crate::observation::Observation;
use crate::rng::Rng;

/// Parameters of the spruce-like method.
#[derive(Debug, Clone, PartialEq)]
pub struct SpruceConfig {
    pub capacity_bps: f64,
    pub size: usize,
    pub pairs: usize,
    pub load: f64,
}

impl Default for SpruceConfig {
    fn default() -> Self {
        SpruceConfig {
            capacity_bps: 0.0,
            size: 1400,
            pairs: 100,
            load: 0.05,
        }
    }
}

/// Per-pair available-bandwidth samples from an observation of a pair
/// train (packets 2k and 2k+1 form pair k). Pairs whose measured send gap
/// is more than 10% off the nominal Δin (`din_ns`) are skipped: when the
/// sender wakes up late for a pair's first packet, both leave back to back
/// and the formula, divided by a near-zero Δin, yields huge outliers.
pub fn pair_samples(obs: &Observation, capacity_bps: f64, din_ns: f64) -> Vec<f64> {
    let v = obs.by_seq();
    let mut out = Vec::new();
    for w in v.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.seq % 2 != 0 || b.seq != a.seq + 1 {
            continue;
        }
        let din = b.send_ns as f64 - a.send_ns as f64;
        let dout = b.recv_ns as f64 - a.recv_ns as f64;
        if din <= 0.0 || dout <= 0.0 || (din - din_ns).abs() > 0.1 * din_ns {
            continue; // mis-paced, reordered or broken timestamps
        }
        out.push(capacity_bps * (1.0 - (dout - din) / din));
    }
    out
}

/// Spruce-like estimator state.
#[derive(Debug)]
pub struct Spruce {
    cfg: SpruceConfig,
    rng: Rng,
    result: Option<Result<Estimate, AbwError>>,
    sent: bool,
}

impl Spruce {
    pub fn new(cfg: SpruceConfig, rng: Rng) -> Result<Spruce, AbwError> {
        if cfg.capacity_bps.is_nan() || cfg.capacity_bps <= 0.0 {
            return Err(AbwError::Config(
                "spruce needs the bottleneck capacity (--capacity)".into(),
            ));
        }
        if cfg.load <= 0.0 || cfg.load > 1.0 || cfg.pairs == 0 {
            return Err(AbwError::Config("spruce: need 0 < load <= 1 and pairs >= 1".into()));
        }
        Ok(Spruce {
            cfg,
            rng,
            result: None,
            sent: false,
        })
    }

    /// The pair train: offsets of 2 x pairs packets.
    fn train(&mut self) -> ProbeSpec {
        let c = &self.cfg;
        let din = c.size as f64 * 8.0 / c.capacity_bps;
        // mean pair period so that 2 packets per period = load * C
        let mean_period = 2.0 * c.size as f64 * 8.0 / (c.load * c.capacity_bps);
        let mut t = 0.0f64;
        let mut offs = Vec::with_capacity(2 * c.pairs);
        for k in 0..c.pairs {
            if k > 0 {
                // exponential gap, but never shorter than the pair itself
                t += self.rng.exponential(mean_period).max(2.0 * din);
            }
            offs.push((t * 1e9).round() as u64);
            offs.push(((t + din) * 1e9).round() as u64);
        }
        ProbeSpec {
            size: c.size,
            offsets_ns: offs,
            pause_s: 0.0,
            rate_bps: c.capacity_bps,
            lead: 0,
        }
    }
}

impl Method for Spruce {
    fn next(&mut self) -> Step {
        if !self.sent {
            self.sent = true;
            return Step::Probe(self.train());
        }
        match self.result.take() {
            Some(Ok(e)) => Step::Done(e),
            Some(Err(e)) => Step::Fail(e),
            None => Step::Fail(AbwError::Protocol("spruce: no observation".into())),
        }
    }

    fn observe(&mut self, _spec: &ProbeSpec, obs: &Observation) {
        let c = self.cfg.capacity_bps;
        let din_ns = self.cfg.size as f64 * 8.0 / c * 1e9;
        let s = pair_samples(obs, c, din_ns);
        let min_pairs = (self.cfg.pairs / 10).max(1);
        self.result = Some(if s.len() < min_pairs {
            Err(AbwError::NoProbes(format!(
                "spruce: only {} of {} pairs usable",
                s.len(),
                self.cfg.pairs
            )))
        } else {
            let mean = s.iter().sum::<f64>() / s.len() as f64;
            Ok(Estimate {
                estimate_bps: mean.clamp(0.0, c),
                low_bps: None,
                high_bps: None,
                detail: json!({ "pairs_used": s.len(), "raw_mean_bps": mean }),
            })
        });
    }

    fn name(&self) -> &'static str {
        "spruce"
    }

    fn params(&self) -> Value {
        json!({
            "capacity_bps": self.cfg.capacity_bps,
            "size": self.cfg.size,
            "pairs": self.cfg.pairs,
            "load": self.cfg.load,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::Rx;

    #[test]
    fn pairs_measure_cross_traffic() {
        // C = 10 Mbit/s, L = 1250 B -> Δin = 1 ms; pair gaps grow by 0.4 ms
        // on average: 40% of C is cross traffic -> A = 6 Mbit/s.
        let mut rx = Vec::new();
        for k in 0..100u32 {
            let t = k as u64 * 50_000_000;
            let extra = if k % 2 == 0 { 300_000 } else { 500_000 };
            rx.push(Rx { seq: 2 * k, send_ns: t, recv_ns: t + 10_000_000 });
            rx.push(Rx {
                seq: 2 * k + 1,
                send_ns: t + 1_000_000,
                recv_ns: t + 11_000_000 + extra,
            });
        }
        // one mis-paced pair (sent back to back) must be ignored
        rx.push(Rx { seq: 200, send_ns: 6_000_000_000, recv_ns: 6_010_000_000 });
        rx.push(Rx { seq: 201, send_ns: 6_000_002_000, recv_ns: 6_011_000_000 });
        let obs = Observation { sent: 202, size: 1250, rx };
        let cfg = SpruceConfig { capacity_bps: 10e6, size: 1250, ..Default::default() };
        let mut m = Spruce::new(cfg, Rng::new(3)).unwrap();
        let Step::Probe(p) = m.next() else { panic!() };
        assert_eq!(p.offsets_ns.len(), 200);
        assert_eq!(p.offsets_ns[1] - p.offsets_ns[0], 1_000_000);
        m.observe(&p, &obs);
        let Step::Done(e) = m.next() else { panic!() };
        assert!((e.estimate_bps - 6e6).abs() < 1e3, "{}", e.estimate_bps);
    }

    #[test]
    fn needs_capacity() {
        assert_eq!(
            Spruce::new(SpruceConfig::default(), Rng::new(1)).unwrap_err().kind(),
            "config"
        );
    }
}
