//! Both directions of the link, the shared radio and the serving cell.
//!
//! Pure: the runner feeds it packets and times; it answers with packets due
//! and with a snapshot of the link state for the emulated modem.

use std::sync::Arc;

use crate::link::{DropReason, Environment, Link, LinkSpec};
use crate::profile::Operator;
use crate::radio::{Radio, RadioSpec};
use crate::route::Route;
use crate::signal::{signal, CellPlan};
use crate::state::{DirectionState, Snapshot};
use crate::Nanos;

/// Which way a packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Node (handset) to network.
    Uplink,
    /// Network to node.
    Downlink,
}

/// Everything needed to build an emulator.
#[derive(Debug, Clone)]
pub struct EmulatorSpec {
    pub operator: Operator,
    /// Radio access technology label ("3G", "LTE", ...).
    pub rat: String,
    pub uplink: LinkSpec,
    pub downlink: LinkSpec,
    pub radio: RadioSpec,
    pub env: Environment,
    pub cells: CellPlan,
    /// Where a moving node travels; None for a fixed node.
    pub route: Option<Route>,
}

/// The emulated link.
#[derive(Debug)]
pub struct Emulator {
    operator: Operator,
    rat: String,
    up: Link,
    down: Link,
    radio: Radio,
    env: Arc<Environment>,
    cells: CellPlan,
    route: Option<Route>,
}

impl Emulator {
    /// An emulator whose epoch (time 0) is now for the caller.
    pub fn new(spec: EmulatorSpec) -> Self {
        let env = Arc::new(spec.env);
        Self {
            operator: spec.operator,
            rat: spec.rat,
            up: Link::new(spec.uplink, Arc::clone(&env)),
            down: Link::new(spec.downlink, Arc::clone(&env)),
            radio: Radio::new(spec.radio),
            env,
            cells: spec.cells,
            route: spec.route,
        }
    }

    fn link_mut(&mut self, dir: Direction) -> &mut Link {
        match dir {
            Direction::Uplink => &mut self.up,
            Direction::Downlink => &mut self.down,
        }
    }

    /// One direction, read-only.
    pub fn link(&self, dir: Direction) -> &Link {
        match dir {
            Direction::Uplink => &self.up,
            Direction::Downlink => &self.down,
        }
    }

    /// A packet entered `dir` at `now`.
    pub fn on_packet(&mut self, dir: Direction, now: Nanos, data: Vec<u8>) -> Option<DropReason> {
        let eligible = self.radio.on_packet(now);
        self.link_mut(dir).enqueue(now, data, eligible)
    }

    /// Packets of `dir` due by `now`, appended to `out`.
    pub fn poll(&mut self, dir: Direction, now: Nanos, out: &mut Vec<Vec<u8>>) {
        if let Some(d) = self.link_mut(dir).poll(now, out) {
            self.radio.touch(d);
        }
    }

    /// When either direction has something due.
    pub fn next_wakeup(&self) -> Option<Nanos> {
        match (self.up.next_wakeup(), self.down.next_wakeup()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The link state at `now`, as the emulated modem reports it.
    pub fn snapshot(&self, now: Nanos) -> Snapshot {
        let handovers = self.env.handovers.count_at(now);
        let load = self.env.diurnal.as_ref().map_or(1.0, |d| d.relative_at(now));
        let quality = self.down.capacity_quality_at(now);
        let direction = |l: &Link| {
            let (queue_packets, queue_bytes) = l.backlog();
            DirectionState {
                rate_bps: l.rate_bps_at(now).map(|r| r.round()),
                queue_packets,
                queue_bytes,
                stats: l.stats(),
            }
        };
        Snapshot {
            emulator_time_s: now as f64 / 1e9,
            operator: self.operator.clone(),
            rat: self.rat.clone(),
            cell_id: self.cells.cell_id(handovers),
            band: self.cells.band(handovers).map(str::to_owned),
            position: self.route.as_ref().map(|r| r.position_at(now)),
            handovers,
            in_outage: self.env.handovers.outage_at(now).is_some(),
            signal: signal(quality, load, self.cells.offset_db(handovers)),
            local_hour: self.env.diurnal.as_ref().map(|d| d.hour_at(now)),
            diurnal_factor: self.env.scale(now),
            radio_idle: self.radio.is_idle_at(now),
            promotions: self.radio.promotions(),
            uplink: direction(&self.up),
            downlink: direction(&self.down),
        }
    }
}
