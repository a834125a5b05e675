//! Pathload-like SLoPS (Self-Loading Periodic Streams).
//!
//! After Jain & Dovrolis, "End-to-end available bandwidth: measurement
//! methodology, dynamics, and relation with TCP throughput" (SIGCOMM 2002)
//! and the pathload tool's documented algorithm:
//! - a *fleet* of `fleet_len` = 12 streams of `stream_len` = K = 100
//!   packets, all at the same rate R;
//! - each stream's one-way delays are split into Γ = sqrt(K) groups whose
//!   medians D_1..D_Γ feed two trend statistics:
//!   PCT = #{k: D_k > D_{k-1}} / (Γ-1), "increasing" above 0.66,
//!   "non-increasing" below 0.54; PDT = (D_Γ - D_1) / Σ|D_k - D_{k-1}|,
//!   "increasing" above 0.55, "non-increasing" below 0.45;
//! - a stream is type I if one metric says increasing and the other does
//!   not say non-increasing, type N symmetrically, else it is discarded;
//! - the fleet says R > A if more than f = 70% of its streams are type I,
//!   R < A if more than 70% are type N, otherwise R is in the *grey region*;
//! - a fleet with a stream losing more than 10% is aborted as R > A;
//! - between streams the sender idles max(RTT, 9 V) (V = stream duration) so
//!   that pathload's average load stays below ~10% of R;
//! - binary search on [Rmin, Rmax] with a grey region [Gmin, Gmax]; it ends
//!   when Rmax - Rmin <= ω, or when the grey region is within χ of both
//!   ends; the output is the range [Rmin, Rmax].
//!
//! Deviations (documented choices): ω and χ are relative to Rmax (pathload
//! uses absolute 1 and 1.5 Mbit/s, meaningless across 2-100 Mbit/s links):
//! ω = `resolution` x Rmax (default 5%), χ = 1.5 ω (pathload's ratio);
//! packet size is fixed (default 1400 bytes) rather than derived from a
//! 100 us minimum period, shrinking only at low rates (as in yaz.rs) to keep
//! a stream within `max_stream_s`; the initial Rmax comes from the same
//! dispersion train as yaz.rs.

use serde_json::{json, Value};

use super::{stream_shape, train_upper_bound, Estimate, Method, ProbeSpec, RateBounds, Step};
use crate::error::AbwError;
use crate::observation::{median, Observation};

/// Parameters of the pathload-like method.
#[derive(Debug, Clone, PartialEq)]
pub struct PathloadConfig {
    pub size: usize,
    pub stream_len: usize,
    pub min_stream_len: usize,
    pub min_size: usize,
    pub max_stream_s: f64,
    pub fleet_len: usize,
    pub idle_factor: f64,
    pub fleet_fraction: f64,
    pub resolution: f64,
    pub high_loss: f64,
    pub train_len: usize,
    pub max_fleets: usize,
    pub rtt_s: f64,
    pub bounds: RateBounds,
}

impl Default for PathloadConfig {
    fn default() -> Self {
        PathloadConfig {
            size: 1400,
            stream_len: 100,
            min_stream_len: 50,
            min_size: 200,
            max_stream_s: 0.2,
            fleet_len: 12,
            idle_factor: 9.0,
            fleet_fraction: 0.7,
            resolution: 0.05,
            high_loss: 0.1,
            train_len: 40,
            max_fleets: 20,
            rtt_s: 0.0,
            bounds: RateBounds {
                min_bps: 100e3,
                max_bps: 1e9,
            },
        }
    }
}

/// Trend type of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trend {
    Increasing,
    NonIncreasing,
    Ambiguous,
}

/// PCT and PDT of a one-way-delay series (sequence order), computed on the
/// medians of sqrt(n) groups. `None` with fewer than 4 groups' worth.
pub fn pct_pdt(owd: &[f64]) -> Option<(f64, f64)> {
    let n = owd.len();
    let groups = (n as f64).sqrt().floor() as usize;
    if groups < 3 {
        return None;
    }
    let per = n / groups;
    let d: Vec<f64> = (0..groups)
        .filter_map(|g| median(&owd[g * per..(g + 1) * per]))
        .collect();
    let incr = d.windows(2).filter(|w| w[1] > w[0]).count() as f64;
    let pct = incr / (d.len() - 1) as f64;
    let total: f64 = d.windows(2).map(|w| (w[1] - w[0]).abs()).sum();
    let pdt = if total > 0.0 {
        (d[d.len() - 1] - d[0]) / total
    } else {
        0.0
    };
    Some((pct, pdt))
}

/// Pathload stream classification from PCT/PDT.
pub fn classify(owd: &[f64]) -> Trend {
    let Some((pct, pdt)) = pct_pdt(owd) else {
        return Trend::Ambiguous;
    };
    let t = |v: f64, lo: f64, hi: f64| {
        if v > hi {
            Trend::Increasing
        } else if v < lo {
            Trend::NonIncreasing
        } else {
            Trend::Ambiguous
        }
    };
    let a = t(pct, 0.54, 0.66);
    let b = t(pdt, 0.45, 0.55);
    use Trend::*;
    match (a, b) {
        (Increasing, x) | (x, Increasing) if x != NonIncreasing => Increasing,
        (NonIncreasing, x) | (x, NonIncreasing) if x != Increasing => NonIncreasing,
        _ => Ambiguous,
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum FleetOutcome {
    Above,
    Below,
    Grey,
}

/// Pathload-like estimator state.
#[derive(Debug)]
pub struct Pathload {
    cfg: PathloadConfig,
    adr: Option<f64>,
    train_tries: u32,
    rmin: f64,
    rmax: f64,
    grey: Option<(f64, f64)>,
    rate: Option<f64>,
    fleet: Vec<Trend>,
    fleet_aborted: bool,
    fleets: usize,
    history: Vec<Value>,
    fail: Option<AbwError>,
    done: bool,
}

impl Pathload {
    pub fn new(cfg: PathloadConfig) -> Pathload {
        Pathload {
            rmin: cfg.bounds.min_bps,
            rmax: cfg.bounds.max_bps,
            cfg,
            adr: None,
            train_tries: 0,
            grey: None,
            rate: None,
            fleet: Vec::new(),
            fleet_aborted: false,
            fleets: 0,
            history: Vec::new(),
            fail: None,
            done: false,
        }
    }

    fn omega(&self) -> f64 {
        self.cfg.resolution * self.rmax
    }

    fn finish(&self) -> Estimate {
        Estimate {
            estimate_bps: (self.rmin + self.rmax) / 2.0,
            low_bps: Some(self.rmin),
            high_bps: Some(self.rmax),
            detail: json!({
                "adr_bps": self.adr,
                "grey_low_bps": self.grey.map(|g| g.0),
                "grey_high_bps": self.grey.map(|g| g.1),
                "fleets": self.history,
            }),
        }
    }

    /// Next fleet rate, or `None` when the search has terminated.
    fn next_rate(&self) -> Option<f64> {
        let omega = self.omega();
        let chi = 1.5 * omega;
        if self.rmax - self.rmin <= omega {
            return None;
        }
        match self.grey {
            None => Some((self.rmin + self.rmax) / 2.0),
            Some((gmin, gmax)) => {
                if self.rmax - gmax > chi {
                    Some((gmax + self.rmax) / 2.0)
                } else if gmin - self.rmin > chi {
                    Some((self.rmin + gmin) / 2.0)
                } else {
                    None
                }
            }
        }
    }

    fn close_fleet(&mut self, rate: f64) {
        let n = self.fleet.len().max(1) as f64;
        let i = self.fleet.iter().filter(|t| **t == Trend::Increasing).count() as f64;
        let nn = self.fleet.iter().filter(|t| **t == Trend::NonIncreasing).count() as f64;
        let f = self.cfg.fleet_fraction;
        let outcome = if self.fleet_aborted || i / n > f {
            FleetOutcome::Above
        } else if nn / n > f {
            FleetOutcome::Below
        } else {
            FleetOutcome::Grey
        };
        self.history.push(json!({
            "rate_bps": rate.round(),
            "streams": self.fleet.len(),
            "type_i": i,
            "type_n": nn,
            "aborted_on_loss": self.fleet_aborted,
            "outcome": format!("{outcome:?}").to_lowercase(),
        }));
        match outcome {
            FleetOutcome::Above => {
                if rate <= self.cfg.bounds.min_bps * (1.0 + 1e-9) {
                    self.fail = Some(AbwError::LinkTooSlow { rate_bps: rate });
                }
                self.rmax = rate;
            }
            FleetOutcome::Below => {
                self.rmin = rate;
                if self.rmax - self.rmin <= self.omega() && self.rmax < self.cfg.bounds.max_bps {
                    self.rmax = (self.rmax * 1.5).min(self.cfg.bounds.max_bps);
                }
            }
            FleetOutcome::Grey => {
                self.grey = Some(match self.grey {
                    None => (rate, rate),
                    Some((a, b)) => (a.min(rate), b.max(rate)),
                });
            }
        }
        // keep the grey region inside the bracket
        if let Some((a, b)) = self.grey {
            let (a, b) = (a.max(self.rmin), b.min(self.rmax));
            self.grey = (a <= b).then_some((a, b));
        }
        self.fleets += 1;
        self.fleet.clear();
        self.fleet_aborted = false;
        self.rate = None;
    }
}

impl Method for Pathload {
    fn next(&mut self) -> Step {
        if let Some(e) = self.fail.take() {
            return Step::Fail(e);
        }
        if self.done {
            return Step::Done(self.finish());
        }
        if self.adr.is_none() {
            return Step::Probe(ProbeSpec::periodic(
                self.cfg.train_len,
                self.cfg.size,
                self.cfg.bounds.max_bps,
                0.0,
            ));
        }
        let rate = match self.rate {
            Some(r) => r,
            None => {
                if self.fleets >= self.cfg.max_fleets {
                    return Step::Done(self.finish());
                }
                match self.next_rate() {
                    Some(r) => {
                        let r = r.max(self.cfg.bounds.min_bps);
                        self.rate = Some(r);
                        r
                    }
                    None => return Step::Done(self.finish()),
                }
            }
        };
        let (n, size) = stream_shape(
            rate,
            self.cfg.stream_len,
            self.cfg.size,
            self.cfg.min_stream_len,
            self.cfg.min_size,
            self.cfg.max_stream_s,
        );
        let v = (n - 1) as f64 * size as f64 * 8.0 / rate;
        let pause = self.cfg.rtt_s.max(self.cfg.idle_factor * v);
        Step::Probe(ProbeSpec::periodic(n, size, rate, pause))
    }

    fn observe(&mut self, spec: &ProbeSpec, obs: &Observation) {
        if self.adr.is_none() {
            match train_upper_bound(obs) {
                Some(adr) => {
                    self.adr = Some(adr);
                    self.rmax = (adr * 1.2).min(self.cfg.bounds.max_bps);
                    self.rmin = self.cfg.bounds.min_bps.min(self.rmax);
                }
                None => {
                    self.train_tries += 1;
                    if self.train_tries >= 3 {
                        self.fail = Some(AbwError::NoProbes(format!(
                            "{} trains of {} packets: at most {} packet(s) arrived",
                            self.train_tries,
                            spec.offsets_ns.len(),
                            obs.rx.len()
                        )));
                    }
                }
            }
            return;
        }
        let Some(rate) = self.rate else { return };
        if obs.loss() > self.cfg.high_loss {
            self.fleet_aborted = true;
            self.close_fleet(rate);
        } else {
            self.fleet.push(classify(&obs.owds()));
            if self.fleet.len() >= self.cfg.fleet_len {
                self.close_fleet(rate);
            }
        }
        if self.fail.is_none() && self.rate.is_none() && self.next_rate().is_none() {
            self.done = true;
        }
    }

    fn name(&self) -> &'static str {
        "pathload"
    }

    fn params(&self) -> Value {
        let c = &self.cfg;
        json!({
            "size": c.size,
            "stream_len": c.stream_len,
            "min_stream_len": c.min_stream_len,
            "min_size": c.min_size,
            "max_stream_s": c.max_stream_s,
            "fleet_len": c.fleet_len,
            "idle_factor": c.idle_factor,
            "fleet_fraction": c.fleet_fraction,
            "resolution": c.resolution,
            "high_loss": c.high_loss,
            "train_len": c.train_len,
            "rtt_s": c.rtt_s,
            "min_rate_bps": c.bounds.min_bps,
            "max_rate_bps": c.bounds.max_bps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observation::synth::fluid;

    #[test]
    fn trend_statistics() {
        let up: Vec<f64> = (0..100).map(|i| i as f64 * 1e-4).collect();
        assert_eq!(classify(&up), Trend::Increasing);
        let flat: Vec<f64> = (0..100).map(|i| if i % 2 == 0 { 0.0 } else { 1e-4 }).collect();
        assert_eq!(classify(&flat), Trend::NonIncreasing);
        let (pct, pdt) = pct_pdt(&up).unwrap();
        assert_eq!(pct, 1.0);
        assert!((pdt - 1.0).abs() < 1e-12);
    }

    #[test]
    fn converges_on_fluid_model() {
        for (cap, cross) in [(10e6, 3e6), (50e6, 10e6), (5e6, 0.0)] {
            let mut m = Pathload::new(PathloadConfig::default());
            let est = loop {
                match m.next() {
                    Step::Probe(p) => {
                        let mut o = fluid(p.offsets_ns.len() as u32, p.size, p.rate_bps, cap, cross);
                        // a little deterministic jitter so flat series are not all-equal
                        for (i, r) in o.rx.iter_mut().enumerate() {
                            r.recv_ns += ((i * 7919) % 13) as u64 * 1000;
                        }
                        m.observe(&p, &o);
                    }
                    Step::Done(e) => break e,
                    Step::Fail(e) => panic!("{e}"),
                }
            };
            let a = cap - cross;
            assert!(est.low_bps.unwrap() <= a * 1.05 && est.high_bps.unwrap() >= a * 0.95,
                "cap {cap} cross {cross}: {:?}", est);
        }
    }
}
