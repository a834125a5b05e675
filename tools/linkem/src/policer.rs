//! Operator policing that varies with the age of a flow.
//!
//! Measurements of European MBB operators in 100 ms bins (the reference
//! campaign of the testbed's seed papers) show two shapes: LTE operators let
//! a new flow ramp up for about 10 s before a stable rate, and 3G operators
//! allow a peak for a few seconds and then drop to a lower stable rate. A
//! token bucket with burst covers the classic "burst then rate" policer.
//!
//! A flow starts with the first packet after the link has been idle for a
//! configurable time (the `Link` detects that and calls `on_flow_start`).
//! Each policer is a gate like the capacity: `earliest` says when the packet
//! may have left, `commit` records that it did.

use crate::{transmission_ns, Nanos};

/// One policer of a direction, as written in a profile.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicerSpec {
    /// Rate grows linearly from `start_fraction * stable_bps` to `stable_bps`
    /// over `duration` after the flow starts.
    Ramp {
        stable_bps: f64,
        start_fraction: f64,
        duration: Nanos,
    },
    /// `peak_bps` for `peak` after the flow starts, then `stable_bps`.
    PeakThenDrop {
        peak_bps: f64,
        peak: Nanos,
        stable_bps: f64,
    },
    /// Tokens arrive at `rate_bps` into a bucket of `burst_bytes`.
    TokenBucket { rate_bps: f64, burst_bytes: f64 },
}

/// A policer with its state.
#[derive(Debug, Clone)]
pub struct Policer {
    spec: PolicerSpec,
    flow_start: Nanos,
    tokens: f64,
    tokens_at: Nanos,
}

impl Policer {
    /// A policer whose first flow starts at time 0 with a full bucket.
    pub fn new(spec: PolicerSpec) -> Self {
        let tokens = match &spec {
            PolicerSpec::TokenBucket { burst_bytes, .. } => *burst_bytes,
            _ => 0.0,
        };
        Self {
            spec,
            flow_start: 0,
            tokens,
            tokens_at: 0,
        }
    }

    /// A new flow starts at `t` (the link was idle long enough).
    pub fn on_flow_start(&mut self, t: Nanos) {
        self.flow_start = t;
    }

    /// The rate this policer allows at `t`, bits/s.
    pub fn rate_bps_at(&self, t: Nanos) -> f64 {
        let age = t.saturating_sub(self.flow_start);
        match &self.spec {
            PolicerSpec::Ramp {
                stable_bps,
                start_fraction,
                duration,
            } => {
                let progress = if *duration == 0 {
                    1.0
                } else {
                    (age as f64 / *duration as f64).min(1.0)
                };
                stable_bps * (start_fraction + (1.0 - start_fraction) * progress)
            }
            PolicerSpec::PeakThenDrop {
                peak_bps,
                peak,
                stable_bps,
            } => {
                if age < *peak {
                    *peak_bps
                } else {
                    *stable_bps
                }
            }
            PolicerSpec::TokenBucket { rate_bps, .. } => *rate_bps,
        }
    }

    fn tokens_at(&self, t: Nanos) -> f64 {
        match &self.spec {
            PolicerSpec::TokenBucket {
                rate_bps,
                burst_bytes,
            } => {
                let dt = t.saturating_sub(self.tokens_at) as f64 / 1e9;
                (self.tokens + dt * rate_bps / 8.0).min(*burst_bytes)
            }
            _ => 0.0,
        }
    }

    /// Earliest time a packet of `size` bytes, ready at `t0`, may leave.
    pub fn earliest(&self, t0: Nanos, size: usize) -> Nanos {
        match &self.spec {
            PolicerSpec::TokenBucket { rate_bps, .. } => {
                let have = self.tokens_at(t0);
                if have >= size as f64 {
                    t0
                } else {
                    let missing = size as f64 - have;
                    t0 + (missing * 8.0 * 1e9 / rate_bps).ceil() as Nanos
                }
            }
            // Rate policers act as a server of the allowed rate: a packet
            // needs its transmission time at the rate in force when it starts.
            _ => t0 + transmission_ns(size, self.rate_bps_at(t0)),
        }
    }

    /// The packet of `size` bytes left at `depart`.
    pub fn commit(&mut self, depart: Nanos, size: usize) {
        if let PolicerSpec::TokenBucket { .. } = self.spec {
            // A packet larger than the burst is let through once the bucket
            // is as full as it gets, leaving it empty (never negative debt
            // beyond one packet).
            self.tokens = (self.tokens_at(depart) - size as f64).max(0.0);
            self.tokens_at = depart;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NS_PER_MS, NS_PER_S};

    #[test]
    fn ramp_reaches_stable_rate_after_duration() {
        let mut p = Policer::new(PolicerSpec::Ramp {
            stable_bps: 10e6,
            start_fraction: 0.1,
            duration: 10 * NS_PER_S,
        });
        p.on_flow_start(5 * NS_PER_S);
        assert!((p.rate_bps_at(5 * NS_PER_S) - 1e6).abs() < 1.0);
        assert!((p.rate_bps_at(10 * NS_PER_S) - 5.5e6).abs() < 1.0);
        assert!((p.rate_bps_at(15 * NS_PER_S) - 10e6).abs() < 1.0);
        assert!((p.rate_bps_at(60 * NS_PER_S) - 10e6).abs() < 1.0);
    }

    #[test]
    fn peak_then_drop() {
        let p = Policer::new(PolicerSpec::PeakThenDrop {
            peak_bps: 8e6,
            peak: 3 * NS_PER_S,
            stable_bps: 2e6,
        });
        assert_eq!(p.rate_bps_at(NS_PER_S), 8e6);
        assert_eq!(p.rate_bps_at(4 * NS_PER_S), 2e6);
        // 1000 bytes at 2 Mbit/s = 4 ms.
        assert_eq!(p.earliest(4 * NS_PER_S, 1000), 4 * NS_PER_S + 4 * NS_PER_MS);
    }

    #[test]
    fn token_bucket_passes_burst_then_rate() {
        let mut p = Policer::new(PolicerSpec::TokenBucket {
            rate_bps: 8e6,
            burst_bytes: 3000.0,
        });
        // Two 1500-byte packets pass at once.
        assert_eq!(p.earliest(0, 1500), 0);
        p.commit(0, 1500);
        assert_eq!(p.earliest(0, 1500), 0);
        p.commit(0, 1500);
        // The third waits 1500 bytes at 1 MB/s = 1.5 ms.
        assert_eq!(p.earliest(0, 1500), 1_500_000);
        p.commit(1_500_000, 1500);
        // After a long idle the bucket is full again, not more.
        assert_eq!(p.earliest(NS_PER_S, 3000), NS_PER_S);
        assert!(p.earliest(NS_PER_S, 3001) > NS_PER_S);
    }
}
