//! The capacity of the bottleneck: unlimited, a constant bit rate, or a
//! Mahimahi trace; in each case scaled by a time-varying factor (the diurnal
//! load profile).
//!
//! A capacity is a *gate*: for the packet at the head of the queue whose
//! service may start at `t0`, `plan` says when its last byte has crossed the
//! link; `commit` makes that plan the new state once the packet really left
//! (possibly later, when another gate was slower).

use std::sync::Arc;

use crate::trace::{Trace, OPPORTUNITY_BYTES};
use crate::{transmission_ns, Nanos, NS_PER_S};

/// Smallest scale factor applied, so that a factor of zero stalls the link
/// for a very long time rather than dividing by zero.
const MIN_SCALE: f64 = 1e-3;

/// What the capacity is made of (from the profile).
#[derive(Debug, Clone)]
pub enum CapacitySpec {
    /// No rate limit at all (only other gates and delays apply).
    Unlimited,
    /// Constant bit rate, bits per second.
    Constant { bps: f64 },
    /// Trace-driven capacity.
    Trace(Arc<Trace>),
}

/// The capacity gate and its position in a trace.
#[derive(Debug, Clone)]
pub struct Capacity {
    spec: CapacitySpec,
    /// Next trace opportunity not yet (fully) used.
    next: u64,
    /// Bytes left in opportunity `next`, if it has been partly used.
    leftover: Option<f64>,
    /// Trace position computed by the last `plan`.
    pending: Option<(u64, Option<f64>)>,
}

impl Capacity {
    /// A gate for `spec`, starting at the trace's start.
    pub fn new(spec: CapacitySpec) -> Self {
        Self {
            spec,
            next: 0,
            leftover: None,
            pending: None,
        }
    }

    /// The specification this gate was built from.
    pub fn spec(&self) -> &CapacitySpec {
        &self.spec
    }

    /// When a packet of `size` bytes whose service starts at `t0` has crossed
    /// the link, with the capacity scaled by `scale(t)`.
    pub fn plan(&mut self, t0: Nanos, size: usize, scale: &dyn Fn(Nanos) -> f64) -> Nanos {
        match &self.spec {
            CapacitySpec::Unlimited => t0,
            CapacitySpec::Constant { bps } => {
                t0 + transmission_ns(size, bps * scale(t0).max(MIN_SCALE))
            }
            CapacitySpec::Trace(trace) => {
                let (mut n, mut avail) = if trace.time_ns(self.next) >= t0 {
                    let full = OPPORTUNITY_BYTES as f64 * scale(trace.time_ns(self.next)).max(MIN_SCALE);
                    (self.next, self.leftover.unwrap_or(full))
                } else {
                    // Opportunities that passed while the queue was empty are
                    // lost, as in Mahimahi.
                    let n = trace.first_at_or_after(t0);
                    (n, OPPORTUNITY_BYTES as f64 * scale(trace.time_ns(n)).max(MIN_SCALE))
                };
                let mut need = size as f64;
                // A packet larger than an opportunity spans several, and
                // several small packets share one (Mahimahi carries partial
                // packets over in the same way).
                while avail + 1e-9 < need {
                    need -= avail;
                    n += 1;
                    avail = OPPORTUNITY_BYTES as f64 * scale(trace.time_ns(n)).max(MIN_SCALE);
                }
                let rest = avail - need;
                self.pending = Some((n, Some(rest)));
                trace.time_ns(n)
            }
        }
    }

    /// Applies the last plan: the packet left at `depart`.
    pub fn commit(&mut self, depart: Nanos) {
        if let (Some((n, rest)), CapacitySpec::Trace(trace)) = (self.pending.take(), &self.spec) {
            if depart > trace.time_ns(n) {
                // Another gate held the packet: this opportunity's rest is gone.
                self.next = n + 1;
                self.leftover = None;
            } else if rest.is_some_and(|r| r < 1.0) {
                self.next = n + 1;
                self.leftover = None;
            } else {
                self.next = n;
                self.leftover = rest;
            }
        }
    }

    /// Capacity around `t`, in bits/s: for a trace, the opportunities in the
    /// next second. `None` when unlimited.
    pub fn rate_bps_at(&self, t: Nanos, scale: &dyn Fn(Nanos) -> f64) -> Option<f64> {
        match &self.spec {
            CapacitySpec::Unlimited => None,
            CapacitySpec::Constant { bps } => Some(bps * scale(t)),
            CapacitySpec::Trace(trace) => {
                let n = trace.opportunities_between(t, t + NS_PER_S);
                Some((n as usize * OPPORTUNITY_BYTES * 8) as f64 * scale(t))
            }
        }
    }

    /// Best capacity this gate can offer, in bits/s (reference for signal).
    pub fn peak_bps(&self) -> Option<f64> {
        match &self.spec {
            CapacitySpec::Unlimited => None,
            CapacitySpec::Constant { bps } => Some(*bps),
            CapacitySpec::Trace(trace) => Some(trace.peak_1s_bps()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NS_PER_MS;

    fn one(_: Nanos) -> f64 {
        1.0
    }

    #[test]
    fn constant_rate_serialises() {
        let mut c = Capacity::new(CapacitySpec::Constant { bps: 12e6 });
        // 1500 bytes at 12 Mbit/s = 1 ms.
        assert_eq!(c.plan(0, 1500, &one), NS_PER_MS);
        c.commit(NS_PER_MS);
        assert_eq!(c.plan(5, 1500, &|_| 0.5), 5 + 2 * NS_PER_MS);
    }

    #[test]
    fn trace_uses_each_opportunity_once() {
        let trace = Arc::new(Trace::parse("1\n2\n2\n4\n").unwrap());
        let mut c = Capacity::new(CapacitySpec::Trace(trace));
        let mut t = 0;
        let mut departures = vec![];
        for _ in 0..5 {
            let d = c.plan(t, 1500, &one);
            c.commit(d);
            departures.push(d / NS_PER_MS);
            t = d;
        }
        assert_eq!(departures, vec![1, 2, 2, 4, 5]);
    }

    #[test]
    fn small_packets_share_an_opportunity() {
        let trace = Arc::new(Trace::parse("10\n20\n").unwrap());
        let mut c = Capacity::new(CapacitySpec::Trace(trace));
        let mut t = 0;
        let mut out = vec![];
        for _ in 0..4 {
            let d = c.plan(t, 500, &one);
            c.commit(d);
            out.push(d / NS_PER_MS);
            t = d;
        }
        assert_eq!(out, vec![10, 10, 10, 20]);
    }

    #[test]
    fn idle_opportunities_are_lost() {
        let trace = Arc::new(Trace::parse("1\n2\n3\n4\n").unwrap());
        let mut c = Capacity::new(CapacitySpec::Trace(trace));
        let d = c.plan(2 * NS_PER_MS + 1, 1500, &one);
        assert_eq!(d, 3 * NS_PER_MS);
    }

    #[test]
    fn held_packet_wastes_the_rest_of_its_opportunity() {
        let trace = Arc::new(Trace::parse("1\n2\n").unwrap());
        let mut c = Capacity::new(CapacitySpec::Trace(trace));
        let d = c.plan(0, 500, &one);
        assert_eq!(d, NS_PER_MS);
        c.commit(NS_PER_MS + 10);
        assert_eq!(c.plan(NS_PER_MS + 10, 500, &one), 2 * NS_PER_MS);
    }

    #[test]
    fn scaled_trace_takes_longer() {
        let text: String = (1..=100).map(|i| format!("{i}\n")).collect();
        let trace = Arc::new(Trace::parse(&text).unwrap());
        let mut c = Capacity::new(CapacitySpec::Trace(trace));
        let d = c.plan(0, 1500, &|_| 0.5);
        assert_eq!(d, 2 * NS_PER_MS);
    }
}
