//! One direction of the emulated link: the pipeline a packet goes through.
//!
//! arrival -> random loss -> outage (drop mode) -> drop-tail queue ->
//! bottleneck service (the slowest of: capacity x diurnal factor, each
//! policer, the packets-per-second cap; never before the radio is promoted
//! nor during a handover outage) -> delay line (base delay + jitter) -> out.
//!
//! Everything here is a pure function of the times passed in: the caller
//! says "a packet arrived at t" and "what is due at t", and asks when to
//! call again.

use std::sync::Arc;

use serde::Serialize;

use crate::delay::{DelayLine, DelaySpec};
use crate::diurnal::Diurnal;
use crate::handover::{HandoverSchedule, OutageMode};
use crate::policer::{Policer, PolicerSpec};
use crate::queue::{DropTailQueue, QueueLimit, Queued};
use crate::rate::{Capacity, CapacitySpec};
use crate::rng::SplitMix64;
use crate::{Nanos, NS_PER_S};

/// Conditions shared by both directions and fixed for a run.
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// Diurnal capacity factor, if any.
    pub diurnal: Option<Diurnal>,
    /// Handover outages.
    pub handovers: HandoverSchedule,
}

impl Environment {
    /// Capacity scale factor at `t`.
    pub fn scale(&self, t: Nanos) -> f64 {
        self.diurnal.as_ref().map_or(1.0, |d| d.factor_at(t))
    }
}

/// Settings of one direction.
#[derive(Debug, Clone)]
pub struct LinkSpec {
    pub capacity: CapacitySpec,
    pub policers: Vec<PolicerSpec>,
    /// Packets per second the gateway lets through at most.
    pub pps_cap: Option<f64>,
    pub queue: QueueLimit,
    pub delay: DelaySpec,
    /// Probability of losing each packet, drawn from `seed`.
    pub loss: f64,
    /// Idle time after which the next packet starts a new flow (policing).
    pub flow_idle: Nanos,
    pub seed: u64,
}

impl LinkSpec {
    /// A link that only forwards: no limit, no delay, no loss.
    pub fn passthrough() -> Self {
        Self {
            capacity: CapacitySpec::Unlimited,
            policers: vec![],
            pps_cap: None,
            queue: QueueLimit::default(),
            delay: DelaySpec::default(),
            loss: 0.0,
            flow_idle: NS_PER_S,
            seed: 1,
        }
    }
}

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// Random loss.
    Loss,
    /// The queue was full.
    QueueFull,
    /// It met a handover outage in drop mode.
    Outage,
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LinkStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub dropped_loss: u64,
    pub dropped_queue: u64,
    pub dropped_outage: u64,
    pub flows: u64,
}

/// One direction of the link.
#[derive(Debug)]
pub struct Link {
    env: Arc<Environment>,
    capacity: Capacity,
    policers: Vec<Policer>,
    pps_interval: Option<Nanos>,
    queue: DropTailQueue,
    delay: DelayLine,
    loss: f64,
    rng: SplitMix64,
    flow_idle: Nanos,
    last_activity: Option<Nanos>,
    last_depart: Option<Nanos>,
    /// Planned departure of the queue's head from the bottleneck.
    head: Option<Nanos>,
    stats: LinkStats,
}

impl Link {
    /// A link built from `spec` in `env`.
    pub fn new(spec: LinkSpec, env: Arc<Environment>) -> Self {
        Self {
            env,
            capacity: Capacity::new(spec.capacity),
            policers: spec.policers.into_iter().map(Policer::new).collect(),
            pps_interval: spec
                .pps_cap
                .filter(|p| *p > 0.0)
                .map(|p| (1e9 / p).round() as Nanos),
            queue: DropTailQueue::new(spec.queue),
            // Distinct streams for loss and jitter, both from the one seed.
            delay: DelayLine::new(spec.delay, spec.seed ^ 0x005E_ED0F_DE1A),
            loss: spec.loss,
            rng: SplitMix64::new(spec.seed),
            flow_idle: spec.flow_idle,
            last_activity: None,
            last_depart: None,
            head: None,
            stats: LinkStats::default(),
        }
    }

    /// A packet arrived at `now`; it may not start service before
    /// `eligible` (radio promotion). Returns the drop reason, if dropped.
    pub fn enqueue(&mut self, now: Nanos, data: Vec<u8>, eligible: Nanos) -> Option<DropReason> {
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += data.len() as u64;
        let idle = self.queue.is_empty()
            && self
                .last_activity
                .is_none_or_idle(now, self.flow_idle);
        if idle {
            for p in &mut self.policers {
                p.on_flow_start(now);
            }
            self.stats.flows += 1;
        }
        self.last_activity = Some(now);
        if self.rng.chance(self.loss) {
            self.stats.dropped_loss += 1;
            return Some(DropReason::Loss);
        }
        if self.env.handovers.mode == OutageMode::Drop && self.env.handovers.outage_at(now).is_some() {
            self.stats.dropped_outage += 1;
            return Some(DropReason::Outage);
        }
        let was_empty = self.queue.is_empty();
        let q = Queued {
            data,
            arrival: now,
            eligible,
        };
        if self.queue.push(q).is_err() {
            self.stats.dropped_queue += 1;
            return Some(DropReason::QueueFull);
        }
        if was_empty {
            self.plan_head();
        }
        None
    }

    /// Plans the departure of the head of the queue (dropping heads that
    /// meet an outage in drop mode).
    fn plan_head(&mut self) {
        self.head = None;
        let env = Arc::clone(&self.env);
        let scale = |t: Nanos| env.scale(t);
        while let Some(q) = self.queue.front() {
            let size = q.data.len();
            let mut t0 = q.arrival.max(q.eligible).max(self.last_depart.unwrap_or(0));
            let mut lost = false;
            while let Some((_, end)) = env.handovers.outage_at(t0) {
                match env.handovers.mode {
                    OutageMode::Hold => t0 = end,
                    OutageMode::Drop => {
                        lost = true;
                        break;
                    }
                }
            }
            if !lost {
                let mut d = self.capacity.plan(t0, size, &scale);
                for p in &self.policers {
                    d = d.max(p.earliest(t0, size));
                }
                if let (Some(iv), Some(last)) = (self.pps_interval, self.last_depart) {
                    d = d.max(last + iv);
                }
                // A packet still crossing the air when an outage starts.
                if let Some((_, end)) = env.handovers.outage_at(d) {
                    match env.handovers.mode {
                        OutageMode::Hold => d = end,
                        OutageMode::Drop => lost = true,
                    }
                }
                if !lost {
                    self.head = Some(d);
                    return;
                }
            }
            self.queue.pop();
            self.stats.dropped_outage += 1;
        }
    }

    /// Moves every packet due by `now` into `out`. Returns the time of the
    /// last departure from the bottleneck, if any packet left.
    pub fn poll(&mut self, now: Nanos, out: &mut Vec<Vec<u8>>) -> Option<Nanos> {
        let mut left = None;
        while let Some(d) = self.head.filter(|&d| d <= now) {
            let Some(q) = self.queue.pop() else { break };
            let size = q.data.len();
            self.capacity.commit(d);
            for p in &mut self.policers {
                p.commit(d, size);
            }
            self.last_depart = Some(d);
            self.last_activity = Some(self.last_activity.map_or(d, |a| a.max(d)));
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += size as u64;
            self.delay.push(d, q.data);
            left = Some(d);
            self.plan_head();
        }
        self.delay.pop_due(now, out);
        left
    }

    /// When `poll` has something to do next.
    pub fn next_wakeup(&self) -> Option<Nanos> {
        match (self.head, self.delay.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Packets and bytes waiting for the bottleneck.
    pub fn backlog(&self) -> (usize, usize) {
        (self.queue.len(), self.queue.bytes())
    }

    /// Rate the link would give a saturating flow at `now`, bits/s
    /// (`None` when nothing limits it).
    pub fn rate_bps_at(&self, now: Nanos) -> Option<f64> {
        let env = &self.env;
        let mut rate = self.capacity.rate_bps_at(now, &|t| env.scale(t));
        for p in &self.policers {
            let r = p.rate_bps_at(now);
            rate = Some(rate.map_or(r, |c| c.min(r)));
        }
        rate
    }

    /// Capacity relative to its best, in [0, 1]: the radio-quality input
    /// of the signal model. A constant or unlimited link reports 0.75, "good
    /// but not ideal" radio conditions, so that its figures sit mid-range.
    pub fn capacity_quality_at(&self, now: Nanos) -> f64 {
        match (self.capacity.spec(), self.capacity.peak_bps()) {
            (CapacitySpec::Trace(_), Some(p)) if p > 0.0 => self
                .capacity
                .rate_bps_at(now, &|_| 1.0)
                .map_or(0.75, |r| (r / p).clamp(0.0, 1.0)),
            _ => 0.75,
        }
    }
}

/// `Option<Nanos>` of the last activity: idle when never active or when
/// quiet for at least `idle`.
trait IdleSince {
    fn is_none_or_idle(&self, now: Nanos, idle: Nanos) -> bool;
}

impl IdleSince for Option<Nanos> {
    fn is_none_or_idle(&self, now: Nanos, idle: Nanos) -> bool {
        match self {
            None => true,
            Some(t) => now.saturating_sub(*t) >= idle,
        }
    }
}
