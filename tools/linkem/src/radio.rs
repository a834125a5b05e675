//! Radio resource control: promotion delay after idle.
//!
//! A handset whose radio has been idle drops to a low-power RRC state; the
//! first packet afterwards waits for channel acquisition. Measured values:
//! LTE RRC_IDLE -> CONNECTED promotion ~260 ms with an ~11.5 s tail timer
//! (Huang et al., "A close examination of performance and power
//! characteristics of 4G LTE networks", MobiSys 2012); 3G IDLE -> DCH ~2 s
//! (Qian et al., "Characterizing radio resource allocation for 3G
//! networks", IMC 2010). The radio is shared by both directions.

use crate::Nanos;

/// Promotion settings.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RadioSpec {
    /// Idle time after which the radio is demoted.
    pub idle: Nanos,
    /// Extra wait for the first packet after a demotion; 0 disables it.
    pub promotion_delay: Nanos,
}

/// Radio state shared by uplink and downlink.
#[derive(Debug, Clone)]
pub struct Radio {
    spec: RadioSpec,
    last_activity: Option<Nanos>,
    ready_at: Nanos,
    promotions: u64,
}

impl Radio {
    /// A radio that starts idle (the first packet ever is promoted).
    pub fn new(spec: RadioSpec) -> Self {
        Self {
            spec,
            last_activity: None,
            ready_at: 0,
            promotions: 0,
        }
    }

    /// A packet arrived at `t`; returns when it may start service.
    pub fn on_packet(&mut self, t: Nanos) -> Nanos {
        if self.spec.promotion_delay > 0 && self.is_idle_at(t) {
            self.ready_at = t + self.spec.promotion_delay;
            self.promotions += 1;
        }
        self.touch(t);
        self.ready_at
    }

    /// The radio carried something at `t` (a departure keeps it awake).
    pub fn touch(&mut self, t: Nanos) {
        self.last_activity = Some(self.last_activity.map_or(t, |l| l.max(t)));
    }

    /// True when the radio would need a promotion at `t`.
    pub fn is_idle_at(&self, t: Nanos) -> bool {
        let long_idle = match self.last_activity {
            None => true,
            Some(l) => t.saturating_sub(l) >= self.spec.idle,
        };
        long_idle && t >= self.ready_at
    }

    /// Promotions so far.
    pub fn promotions(&self) -> u64 {
        self.promotions
    }

    /// When a promotion in progress completes.
    pub fn ready_at(&self) -> Nanos {
        self.ready_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NS_PER_MS, NS_PER_S};

    #[test]
    fn first_packet_after_idle_waits() {
        let mut r = Radio::new(RadioSpec {
            idle: 2 * NS_PER_S,
            promotion_delay: 300 * NS_PER_MS,
        });
        assert_eq!(r.on_packet(NS_PER_S), NS_PER_S + 300 * NS_PER_MS);
        // Packets during the promotion wait for the same moment.
        assert_eq!(r.on_packet(NS_PER_S + 1), NS_PER_S + 300 * NS_PER_MS);
        // Busy radio: no delay.
        assert_eq!(r.on_packet(2 * NS_PER_S), NS_PER_S + 300 * NS_PER_MS);
        // Idle for 2 s: promoted again.
        assert_eq!(r.on_packet(4 * NS_PER_S), 4 * NS_PER_S + 300 * NS_PER_MS);
        assert_eq!(r.promotions(), 2);
    }

    #[test]
    fn departures_keep_the_radio_awake() {
        let mut r = Radio::new(RadioSpec {
            idle: NS_PER_S,
            promotion_delay: 100,
        });
        r.on_packet(0);
        r.touch(3 * NS_PER_S);
        assert_eq!(r.on_packet(3 * NS_PER_S + 10), 100);
    }

    #[test]
    fn disabled_promotion_never_waits() {
        let mut r = Radio::new(RadioSpec::default());
        assert_eq!(r.on_packet(5), 0);
        assert_eq!(r.promotions(), 0);
    }
}
