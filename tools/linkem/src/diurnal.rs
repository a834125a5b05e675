//! Diurnal load: capacity scaled by a factor per hour of the node's local
//! day, with time compression so that a "day" can pass in minutes.
//!
//! The local time of the emulator's epoch is resolved by the caller (from
//! the wall clock and the profile's time zone); this module only maps
//! elapsed emulator time to a local hour, so it is pure and testable.

use crate::Nanos;

/// Seconds in a day.
const DAY_S: f64 = 86_400.0;

/// A 24-entry per-hour factor profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Diurnal {
    factors: [f64; 24],
    /// Emulated seconds per real second (240: a day in 6 minutes).
    compression: f64,
    /// Local time of day at the epoch, seconds since local midnight.
    start_local_s: f64,
}

impl Diurnal {
    /// A profile; `start_local_s` is the local time of day at the epoch.
    pub fn new(factors: [f64; 24], compression: f64, start_local_s: f64) -> Self {
        Self {
            factors,
            compression,
            start_local_s,
        }
    }

    /// Local time of day at emulator time `t`, seconds since midnight.
    pub fn local_s_at(&self, t: Nanos) -> f64 {
        (self.start_local_s + t as f64 / 1e9 * self.compression).rem_euclid(DAY_S)
    }

    /// Local hour (0..24) at `t`.
    pub fn hour_at(&self, t: Nanos) -> usize {
        ((self.local_s_at(t) / 3600.0) as usize).min(23)
    }

    /// Capacity factor at `t`: the factor of the current local hour (a step
    /// function, like the hourly bins in which the campaign reports).
    pub fn factor_at(&self, t: Nanos) -> f64 {
        self.factors[self.hour_at(t)]
    }

    /// Factor relative to the day's best hour, in (0, 1]: the load share
    /// that the signal model turns into interference.
    pub fn relative_at(&self, t: Nanos) -> f64 {
        let max = self.factors.iter().cloned().fold(f64::MIN, f64::max);
        if max <= 0.0 {
            1.0
        } else {
            self.factor_at(t) / max
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NS_PER_S;

    fn ramp() -> [f64; 24] {
        let mut f = [0.0; 24];
        for (h, v) in f.iter_mut().enumerate() {
            *v = 1.0 - h as f64 / 48.0;
        }
        f
    }

    #[test]
    fn compression_240_passes_a_day_in_six_minutes() {
        let d = Diurnal::new(ramp(), 240.0, 0.0);
        assert_eq!(d.hour_at(0), 0);
        // One hour = 15 s at 240x.
        assert_eq!(d.hour_at(15 * NS_PER_S), 1);
        assert_eq!(d.hour_at(359 * NS_PER_S), 23);
        assert_eq!(d.hour_at(360 * NS_PER_S), 0);
        assert_eq!(d.factor_at(15 * NS_PER_S), 1.0 - 1.0 / 48.0);
    }

    #[test]
    fn start_time_is_local() {
        // Epoch at 22:30 local.
        let d = Diurnal::new(ramp(), 1.0, 22.5 * 3600.0);
        assert_eq!(d.hour_at(0), 22);
        assert_eq!(d.hour_at(3600 * NS_PER_S), 23);
        assert_eq!(d.hour_at(7200 * NS_PER_S), 0);
        assert!((d.relative_at(0) - (1.0 - 22.0 / 48.0)).abs() < 1e-9);
    }
}
