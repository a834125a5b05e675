//! Handovers: short outages at which the serving cell changes.
//!
//! During an outage packets are either held (the bearer is kept, as in an
//! LTE X2 handover with data forwarding) or dropped (a break-before-make
//! handover or a radio link failure). LTE handover interruption is tens of
//! milliseconds: 3GPP TS 36.133 bounds it near 50 ms plus RACH; drive tests
//! report 40-80 ms (Li et al., "A measurement study of LTE handover",
//! hence the default of 50 ms in the profiles).

use crate::Nanos;

/// What happens to packets during an outage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OutageMode {
    /// Packets wait until the outage ends.
    #[default]
    Hold,
    /// Packets arriving or due during the outage are lost.
    Drop,
}

/// When handovers happen and how long they interrupt the link.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HandoverSchedule {
    /// Period of periodic handovers (the first at `every`), if any.
    pub every: Option<Nanos>,
    /// Extra handovers at these times (sorted).
    pub at: Vec<Nanos>,
    /// Length of each outage.
    pub outage: Nanos,
    /// Hold or drop during outages.
    pub mode: OutageMode,
}

impl HandoverSchedule {
    /// No handovers at all.
    pub fn none() -> Self {
        Self::default()
    }

    /// Start of the latest handover at or before `t`.
    fn last_start(&self, t: Nanos) -> Option<Nanos> {
        let periodic = self
            .every
            .filter(|&e| e > 0 && t >= e)
            .map(|e| t / e * e);
        let idx = self.at.partition_point(|&s| s <= t);
        let listed = idx.checked_sub(1).map(|i| self.at[i]);
        periodic.max(listed)
    }

    /// Number of handovers started at or before `t`: the index of the
    /// serving cell.
    pub fn count_at(&self, t: Nanos) -> u64 {
        let periodic = self.every.filter(|&e| e > 0).map_or(0, |e| t / e);
        periodic + self.at.partition_point(|&s| s <= t) as u64
    }

    /// The outage `t` falls into, as `(start, end)`.
    pub fn outage_at(&self, t: Nanos) -> Option<(Nanos, Nanos)> {
        if self.outage == 0 {
            return None;
        }
        let s = self.last_start(t)?;
        (t < s + self.outage).then_some((s, s + self.outage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NS_PER_MS, NS_PER_S};

    #[test]
    fn periodic_outages_and_cell_count() {
        let h = HandoverSchedule {
            every: Some(10 * NS_PER_S),
            at: vec![],
            outage: 50 * NS_PER_MS,
            mode: OutageMode::Hold,
        };
        assert_eq!(h.outage_at(5 * NS_PER_S), None);
        assert_eq!(h.count_at(5 * NS_PER_S), 0);
        assert_eq!(
            h.outage_at(10 * NS_PER_S + NS_PER_MS),
            Some((10 * NS_PER_S, 10 * NS_PER_S + 50 * NS_PER_MS))
        );
        assert_eq!(h.outage_at(10 * NS_PER_S + 50 * NS_PER_MS), None);
        assert_eq!(h.count_at(25 * NS_PER_S), 2);
    }

    #[test]
    fn scheduled_outages() {
        let h = HandoverSchedule {
            every: None,
            at: vec![3 * NS_PER_S, 7 * NS_PER_S],
            outage: NS_PER_S,
            mode: OutageMode::Drop,
        };
        assert_eq!(h.count_at(0), 0);
        assert!(h.outage_at(3 * NS_PER_S + 500 * NS_PER_MS).is_some());
        assert!(h.outage_at(5 * NS_PER_S).is_none());
        assert_eq!(h.count_at(8 * NS_PER_S), 2);
    }
}
