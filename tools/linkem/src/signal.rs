//! Signal figures that an emulated modem reports, derived from the link's
//! state so that they move with capacity, load and handovers.
//!
//! The mapping is a plausible monotone model, not a radio simulation:
//! - `quality` in [0, 1] is the downlink capacity relative to its best
//!   (trace variation, i.e. radio conditions);
//! - `load` in (0, 1] is the diurnal factor relative to the best hour (more
//!   users mean more interference: lower SINR and RSRQ, same RSRP);
//! - each cell adds its own offset, so a handover changes the figures.
//!
//! Ranges: RSRP -115..-80 dBm, RSRQ -19.5..-3 dB (the reporting range of
//! 3GPP TS 36.133 section 9.1), SINR -5..25 dB (the span of the LTE CQI
//! table); RSSI follows from the definition RSRQ = N * RSRP / RSSI
//! (3GPP TS 36.214 section 5.1.3) with N = 50 resource blocks (10 MHz).

use serde::Serialize;

use crate::rng::SplitMix64;

/// Resource blocks of a 10 MHz LTE carrier (3GPP TS 36.101 table 5.6-1).
const RESOURCE_BLOCKS: f64 = 50.0;

/// Signal figures as a modem reports them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Signal {
    pub rssi_dbm: f64,
    pub rsrp_dbm: f64,
    pub rsrq_db: f64,
    pub sinr_db: f64,
}

/// Signal for `quality` and `load` in a cell with `cell_offset_db`.
pub fn signal(quality: f64, load: f64, cell_offset_db: f64) -> Signal {
    let q = quality.clamp(0.0, 1.0);
    let l = load.clamp(0.0, 1.0);
    let rsrp = (-115.0 + 35.0 * q + cell_offset_db).clamp(-140.0, -44.0);
    let rsrq = (-19.5 + 16.5 * q * l + cell_offset_db / 4.0).clamp(-19.5, -3.0);
    let sinr = (-5.0 + 30.0 * q * l + cell_offset_db / 2.0).clamp(-20.0, 30.0);
    let rssi = 10.0 * RESOURCE_BLOCKS.log10() + rsrp - rsrq;
    Signal {
        rssi_dbm: round1(rssi),
        rsrp_dbm: round1(rsrp),
        rsrq_db: round1(rsrq),
        sinr_db: round1(sinr),
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The cells a node is handed over between.
#[derive(Debug, Clone, PartialEq)]
pub struct CellPlan {
    ids: Vec<u64>,
    seed: u64,
    bands: Vec<String>,
}

impl CellPlan {
    /// Cycles through `ids`; when empty, cell ids are drawn from `seed`.
    pub fn new(ids: Vec<u64>, seed: u64) -> Self {
        Self { ids, seed, bands: Vec::new() }
    }

    /// The same plan with frequency bands ("B3", "B20", ...) cycled through
    /// at each handover, as a modem reports the band of its serving cell.
    pub fn with_bands(mut self, bands: Vec<String>) -> Self {
        self.bands = bands;
        self
    }

    /// Band of the serving cell after `index` handovers; None when the
    /// profile names none.
    pub fn band(&self, index: u64) -> Option<&str> {
        if self.bands.is_empty() {
            return None;
        }
        Some(self.bands[(index % self.bands.len() as u64) as usize].as_str())
    }

    fn draw(&self, index: u64) -> SplitMix64 {
        SplitMix64::new(self.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// Cell id after `index` handovers.
    pub fn cell_id(&self, index: u64) -> u64 {
        if self.ids.is_empty() {
            // A 28-bit E-UTRAN cell identity: 20-bit eNB id, 8-bit cell id.
            self.draw(index).next_u64() & 0x0FFF_FFFF
        } else {
            self.ids[(index % self.ids.len() as u64) as usize]
        }
    }

    /// Signal offset of cell `index`, uniform in [-6, +6] dB.
    pub fn offset_db(&self, index: u64) -> f64 {
        let mut r = self.draw(index);
        r.next_u64();
        (r.next_f64() * 12.0 - 6.0).round()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn better_quality_better_signal() {
        let bad = signal(0.1, 1.0, 0.0);
        let good = signal(0.9, 1.0, 0.0);
        assert!(good.rsrp_dbm > bad.rsrp_dbm);
        assert!(good.sinr_db > bad.sinr_db);
        assert!(good.rsrq_db > bad.rsrq_db);
    }

    #[test]
    fn load_lowers_sinr_not_rsrp() {
        let busy = signal(0.8, 0.4, 0.0);
        let calm = signal(0.8, 1.0, 0.0);
        assert_eq!(busy.rsrp_dbm, calm.rsrp_dbm);
        assert!(busy.sinr_db < calm.sinr_db);
    }

    #[test]
    fn rssi_follows_the_rsrq_definition() {
        let s = signal(0.5, 1.0, 0.0);
        let n = 10.0 * 50f64.log10();
        assert!((s.rssi_dbm - (n + s.rsrp_dbm - s.rsrq_db)).abs() < 0.11);
    }

    #[test]
    fn cells_change_with_index() {
        let drawn = CellPlan::new(vec![], 42);
        assert_ne!(drawn.cell_id(0), drawn.cell_id(1));
        assert_eq!(drawn.cell_id(3), CellPlan::new(vec![], 42).cell_id(3));
        let listed = CellPlan::new(vec![10, 20], 0);
        assert_eq!(listed.cell_id(0), 10);
        assert_eq!(listed.cell_id(3), 20);
        assert_eq!(listed.band(0), None);
        let banded = CellPlan::new(vec![10, 20], 1).with_bands(vec!["B3".into(), "B20".into(), "B7".into()]);
        assert_eq!(banded.band(0), Some("B3"));
        assert_eq!(banded.band(4), Some("B20"));
    }
}
