//! Operator link profiles (YAML), one per operator and country.
//!
//! A profile names the operator (`operator: {mcc_mnc, name, country}`), the
//! radio access technology, and an `uplink:` and a `downlink:` section, plus
//! optional radio promotion, diurnal load and handover sections. `build`
//! turns it into the pure emulator's settings, resolving trace paths against
//! the profile's folder and the local time of day from the time zone.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Offset, TimeZone, Timelike, Utc};
use serde::{Deserialize, Serialize};

use crate::delay::DelaySpec;
use crate::diurnal::Diurnal;
use crate::emulator::EmulatorSpec;
use crate::handover::{HandoverSchedule, OutageMode};
use crate::link::{Environment, LinkSpec};
use crate::policer::PolicerSpec;
use crate::queue::QueueLimit;
use crate::radio::RadioSpec;
use crate::rate::CapacitySpec;
use crate::route::Route;
use crate::signal::CellPlan;
use crate::trace::Trace;
use crate::{Error, Nanos, NS_PER_MS, NS_PER_S};

/// Who operates the network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Operator {
    /// Mobile country code and network code, e.g. "242-01".
    pub mcc_mnc: String,
    pub name: String,
    /// ISO 3166-1 alpha-2 country code.
    pub country: String,
}

/// A whole profile file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Short name, e.g. "no-telenor-lte"; defaults to the file name.
    #[serde(default)]
    pub name: Option<String>,
    pub operator: Operator,
    /// "3G", "LTE", "5G", ...
    pub rat: String,
    /// Frequency band the modem reports ("B20" for LTE 800, "B1" for UMTS
    /// 2100); `handover.bands` overrides it per serving cell.
    #[serde(default)]
    pub band: Option<String>,
    /// IANA time zone ("Europe/Oslo") or UTC offset ("+01:00"); UTC if absent.
    #[serde(default)]
    pub timezone: Option<String>,
    /// Seed of every random draw (loss, jitter, cell ids).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Where the numbers come from.
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub radio: RadioSection,
    #[serde(default)]
    pub diurnal: Option<DiurnalSection>,
    #[serde(default)]
    pub handover: Option<HandoverSection>,
    /// A moving node's path, reported by the emulated GPS.
    #[serde(default)]
    pub route: Option<RouteSection>,
    pub uplink: DirectionSection,
    pub downlink: DirectionSection,
}

fn default_seed() -> u64 {
    1
}

/// Radio promotion after idle.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RadioSection {
    /// Idle time before demotion. Default 11.5 s, the LTE tail timer
    /// measured by Huang et al. (MobiSys 2012).
    #[serde(default = "default_radio_idle_s")]
    pub idle_s: f64,
    /// Extra wait of the first packet after idle; 0 disables.
    #[serde(default)]
    pub promotion_delay_ms: f64,
}

fn default_radio_idle_s() -> f64 {
    11.5
}

impl Default for RadioSection {
    fn default() -> Self {
        Self {
            idle_s: default_radio_idle_s(),
            promotion_delay_ms: 0.0,
        }
    }
}

/// Capacity factor per local hour.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiurnalSection {
    /// 24 factors, hour 0 (00:00-00:59 local) first.
    pub factors: Vec<f64>,
    /// Emulated seconds per real second (240: a day in 6 minutes).
    #[serde(default = "one")]
    pub compression: f64,
    /// Local hour at start (fractional allowed); default: the wall clock.
    #[serde(default)]
    pub start_hour: Option<f64>,
    /// The instant from which compressed time runs (RFC 3339): the emulated local
    /// time is then that instant's local time plus `compression` times the wall time
    /// elapsed since it, whenever the emulator starts. A campaign compressed by the
    /// same factor from the same anchor sees the same hours (its `time_scale` and
    /// `time_anchor`). Default: the emulator's start. Exclusive with `start_hour`.
    #[serde(default)]
    pub anchor: Option<DateTime<Utc>>,
}

fn one() -> f64 {
    1.0
}

/// Periodic and/or scheduled handovers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandoverSection {
    /// Period of handovers, seconds (of real time).
    #[serde(default)]
    pub every_s: Option<f64>,
    /// Extra handovers at these times since start, seconds.
    #[serde(default)]
    pub at_s: Vec<f64>,
    /// Outage length; default 50 ms (LTE handover interruption, see
    /// `handover.rs`).
    #[serde(default = "default_outage_ms")]
    pub outage_ms: f64,
    #[serde(default)]
    pub mode: OutageModeName,
    /// Cells to cycle through; drawn from the seed when empty.
    #[serde(default)]
    pub cell_ids: Vec<u64>,
    /// Bands of the cells, cycled like `cell_ids`; the profile's `band`
    /// when empty.
    #[serde(default)]
    pub bands: Vec<String>,
}

/// A moving node: out along the waypoints and back at a constant speed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// `[latitude, longitude]` pairs in degrees, at least two.
    pub waypoints: Vec<[f64; 2]>,
    /// Ground speed, km/h.
    pub speed_kmh: f64,
}

fn default_outage_ms() -> f64 {
    50.0
}

/// `hold` or `drop`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum OutageModeName {
    #[default]
    Hold,
    Drop,
}

/// One direction.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectionSection {
    /// Constant capacity, bits/s (exclusive with `trace`; neither: unlimited).
    #[serde(default)]
    pub rate_bps: Option<f64>,
    /// Mahimahi trace file, relative to the profile's folder.
    #[serde(default)]
    pub trace: Option<PathBuf>,
    #[serde(default)]
    pub delay_ms: f64,
    /// Uniform jitter half-width (netem's convention).
    #[serde(default)]
    pub jitter_ms: f64,
    /// Let jitter reorder packets.
    #[serde(default)]
    pub reorder: bool,
    /// Random loss probability in [0, 1].
    #[serde(default)]
    pub loss: f64,
    /// Drop-tail limit in bytes (exclusive with `queue_packets`).
    #[serde(default)]
    pub queue_bytes: Option<usize>,
    /// Drop-tail limit in packets; default 1000 (see `queue.rs`).
    #[serde(default)]
    pub queue_packets: Option<usize>,
    /// Packets per second at most (gateways cap pps, so small probes see
    /// a lower bit rate than large ones).
    #[serde(default)]
    pub pps_cap: Option<f64>,
    /// Idle time after which the next packet starts a new flow for the
    /// policers. Default 2 s: longer than any pause inside one bulk
    /// transfer, far shorter than the 5 min between measurement sessions.
    #[serde(default = "default_flow_idle_s")]
    pub flow_idle_s: f64,
    #[serde(default)]
    pub policing: Vec<PolicingSection>,
}

fn default_flow_idle_s() -> f64 {
    2.0
}

/// One policer.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PolicingSection {
    /// Linear ramp from `start_fraction` of the stable rate.
    Ramp {
        /// Default: the direction's `rate_bps`.
        #[serde(default)]
        stable_bps: Option<f64>,
        #[serde(default = "default_start_fraction")]
        start_fraction: f64,
        /// Default 11 s: with start fraction 0.1 the rate passes 90% of the
        /// stable rate ~9.8 s into the flow, the "~10 s ramp" of the
        /// reference LTE measurements.
        #[serde(default = "default_ramp_s")]
        duration_s: f64,
    },
    /// `peak_bps` for `peak_s`, then `stable_bps`.
    PeakThenDrop {
        peak_bps: f64,
        peak_s: f64,
        /// Default: the direction's `rate_bps`.
        #[serde(default)]
        stable_bps: Option<f64>,
    },
    /// Token bucket.
    TokenBucket { rate_bps: f64, burst_bytes: f64 },
}

fn default_start_fraction() -> f64 {
    0.1
}

fn default_ramp_s() -> f64 {
    11.0
}

/// Values given on the command line that win over the profile.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub seed: Option<u64>,
    pub compression: Option<f64>,
    pub start_hour: Option<f64>,
    pub anchor: Option<DateTime<Utc>>,
}

fn secs(s: f64) -> Nanos {
    (s.max(0.0) * NS_PER_S as f64).round() as Nanos
}

fn millis(ms: f64) -> Nanos {
    (ms.max(0.0) * NS_PER_MS as f64).round() as Nanos
}

fn bad(msg: impl Into<String>) -> Error {
    Error::Profile(msg.into())
}

impl Profile {
    /// Reads a profile file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        let mut p: Profile = serde_yaml::from_str(&text).map_err(|source| Error::Yaml {
            path: path.to_owned(),
            source,
        })?;
        if p.name.is_none() {
            p.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        }
        Ok(p)
    }

    /// Builds the emulator settings. `dir` resolves relative trace paths;
    /// `now` gives the local time of day when the profile does not fix it.
    pub fn build(&self, dir: &Path, now: DateTime<Utc>, o: &Overrides) -> Result<EmulatorSpec, Error> {
        let seed = o.seed.unwrap_or(self.seed);
        let diurnal = match &self.diurnal {
            None => None,
            Some(d) => {
                let factors: [f64; 24] = d.factors.clone().try_into().map_err(|v: Vec<f64>| {
                    bad(format!("diurnal.factors has {} entries, needs 24 (one per hour)", v.len()))
                })?;
                if factors.iter().any(|f| !(f.is_finite() && *f > 0.0)) {
                    return Err(bad("diurnal.factors must all be positive"));
                }
                let compression = o.compression.unwrap_or(d.compression);
                if !(compression.is_finite() && compression > 0.0) {
                    return Err(bad("diurnal.compression must be positive"));
                }
                let start_local_s = match (o.start_hour.or(d.start_hour), o.anchor.or(d.anchor)) {
                    (Some(_), Some(_)) => {
                        return Err(bad("diurnal: give start_hour or anchor, not both"));
                    }
                    (Some(h), None) => h * 3600.0,
                    (None, Some(anchor)) => {
                        let at_anchor = local_seconds_of_day(self.timezone.as_deref(), anchor)?;
                        anchored_local_s(at_anchor, anchor, now, compression)
                    }
                    (None, None) => local_seconds_of_day(self.timezone.as_deref(), now)?,
                };
                Some(Diurnal::new(factors, compression, start_local_s))
            }
        };
        let profile_bands: Vec<String> = self.band.iter().cloned().collect();
        let (handovers, cells) = match &self.handover {
            None => (HandoverSchedule::none(), CellPlan::new(vec![], seed).with_bands(profile_bands)),
            Some(h) => {
                let mut at: Vec<Nanos> = h.at_s.iter().map(|s| secs(*s)).collect();
                at.sort_unstable();
                let schedule = HandoverSchedule {
                    every: h.every_s.filter(|e| *e > 0.0).map(secs),
                    at,
                    outage: millis(h.outage_ms),
                    mode: match h.mode {
                        OutageModeName::Hold => OutageMode::Hold,
                        OutageModeName::Drop => OutageMode::Drop,
                    },
                };
                let bands = if h.bands.is_empty() { profile_bands } else { h.bands.clone() };
                (schedule, CellPlan::new(h.cell_ids.clone(), seed).with_bands(bands))
            }
        };
        let route = match &self.route {
            None => None,
            Some(r) => Some(
                Route::new(r.waypoints.iter().map(|p| (p[0], p[1])).collect(), r.speed_kmh / 3.6)
                    .map_err(bad)?,
            ),
        };
        Ok(EmulatorSpec {
            operator: self.operator.clone(),
            rat: self.rat.clone(),
            uplink: self.uplink.build("uplink", dir, seed)?,
            downlink: self.downlink.build("downlink", dir, seed.wrapping_add(1))?,
            radio: RadioSpec {
                idle: secs(self.radio.idle_s),
                promotion_delay: millis(self.radio.promotion_delay_ms),
            },
            env: Environment {
                diurnal,
                handovers,
            },
            cells,
            route,
        })
    }
}

impl DirectionSection {
    fn build(&self, which: &str, dir: &Path, seed: u64) -> Result<LinkSpec, Error> {
        let capacity = match (&self.rate_bps, &self.trace) {
            (Some(_), Some(_)) => {
                return Err(bad(format!("{which}: give rate_bps or trace, not both")))
            }
            (Some(r), None) if !(r.is_finite() && *r > 0.0) => {
                return Err(bad(format!("{which}.rate_bps must be positive")))
            }
            (Some(r), None) => CapacitySpec::Constant { bps: *r },
            (None, Some(t)) => CapacitySpec::Trace(Arc::new(Trace::load(&dir.join(t))?)),
            (None, None) => CapacitySpec::Unlimited,
        };
        let queue = match (self.queue_bytes, self.queue_packets) {
            (Some(_), Some(_)) => {
                return Err(bad(format!("{which}: give queue_bytes or queue_packets, not both")))
            }
            (Some(b), None) => QueueLimit::Bytes(b),
            (None, Some(p)) => QueueLimit::Packets(p),
            (None, None) => QueueLimit::default(),
        };
        if !(0.0..=1.0).contains(&self.loss) {
            return Err(bad(format!("{which}.loss must be within [0, 1]")));
        }
        let stable = |s: Option<f64>, kind: &str| {
            s.or(self.rate_bps).ok_or_else(|| {
                bad(format!("{which}: policing {kind} needs stable_bps when there is no rate_bps"))
            })
        };
        let mut policers = Vec::new();
        for p in &self.policing {
            policers.push(match p {
                PolicingSection::Ramp {
                    stable_bps,
                    start_fraction,
                    duration_s,
                } => {
                    if !(0.0..=1.0).contains(start_fraction) || *start_fraction == 0.0 {
                        return Err(bad(format!("{which}: ramp start_fraction must be in (0, 1]")));
                    }
                    PolicerSpec::Ramp {
                        stable_bps: stable(*stable_bps, "ramp")?,
                        start_fraction: *start_fraction,
                        duration: secs(*duration_s),
                    }
                }
                PolicingSection::PeakThenDrop {
                    peak_bps,
                    peak_s,
                    stable_bps,
                } => PolicerSpec::PeakThenDrop {
                    peak_bps: *peak_bps,
                    peak: secs(*peak_s),
                    stable_bps: stable(*stable_bps, "peak_then_drop")?,
                },
                PolicingSection::TokenBucket {
                    rate_bps,
                    burst_bytes,
                } => PolicerSpec::TokenBucket {
                    rate_bps: *rate_bps,
                    burst_bytes: *burst_bytes,
                },
            });
        }
        Ok(LinkSpec {
            capacity,
            policers,
            pps_cap: self.pps_cap,
            queue,
            delay: DelaySpec {
                base: millis(self.delay_ms),
                jitter: millis(self.jitter_ms),
                reorder: self.reorder,
            },
            loss: self.loss,
            flow_idle: secs(self.flow_idle_s),
            seed,
        })
    }
}

/// Seconds since local midnight at `now` in `tz` (IANA name or "+HH:MM").
/// Local time of day at `now` on a clock that ran `compression` times faster than the
/// wall clock since `anchor`, whose local time of day was `at_anchor_s`. Before the
/// anchor the clock runs backwards the same way, so any start time works.
pub fn anchored_local_s(at_anchor_s: f64, anchor: DateTime<Utc>, now: DateTime<Utc>, compression: f64) -> f64 {
    let elapsed_s = (now - anchor).num_microseconds().map_or_else(
        || (now - anchor).num_seconds() as f64,
        |us| us as f64 / 1e6,
    );
    (at_anchor_s + elapsed_s * compression).rem_euclid(86_400.0)
}

pub fn local_seconds_of_day(tz: Option<&str>, now: DateTime<Utc>) -> Result<f64, Error> {
    let offset_s = match tz {
        None | Some("UTC") | Some("Z") => 0,
        Some(name) => match parse_offset(name) {
            Some(s) => s,
            None => {
                let zone = chrono_tz::Tz::from_str(name).map_err(|_| Error::TimeZone(name.into()))?;
                zone.offset_from_utc_datetime(&now.naive_utc())
                    .fix()
                    .local_minus_utc() as i64
            }
        },
    };
    let utc_s = now.num_seconds_from_midnight() as i64;
    Ok((utc_s + offset_s).rem_euclid(86_400) as f64)
}

/// "+01:00", "-0530", "+2" -> seconds east of UTC.
fn parse_offset(s: &str) -> Option<i64> {
    let (sign, rest) = match s.as_bytes().first()? {
        b'+' => (1, &s[1..]),
        b'-' => (-1, &s[1..]),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let (h, m) = if digits.len() <= 2 {
        (digits.parse::<i64>().ok()?, 0)
    } else {
        let split = digits.len() - 2;
        (digits[..split].parse::<i64>().ok()?, digits[split..].parse::<i64>().ok()?)
    };
    Some(sign * (h * 3600 + m * 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
operator: {mcc_mnc: "242-01", name: "Telenor", country: "NO"}
rat: LTE
uplink: {rate_bps: 5000000}
downlink:
  rate_bps: 20000000
  delay_ms: 20
  policing:
    - kind: ramp
"#;

    #[test]
    fn minimal_profile_builds() {
        let p: Profile = serde_yaml::from_str(MINIMAL).unwrap();
        let spec = p.build(Path::new("."), Utc::now(), &Overrides::default()).unwrap();
        assert_eq!(spec.downlink.delay.base, 20 * NS_PER_MS);
        assert_eq!(
            spec.downlink.policers,
            vec![PolicerSpec::Ramp {
                stable_bps: 20e6,
                start_fraction: 0.1,
                duration: 11 * NS_PER_S
            }]
        );
        assert_eq!(spec.uplink.queue, QueueLimit::Packets(1000));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let text = MINIMAL.replace("rat: LTE", "rat: LTE\nrate: 5");
        assert!(serde_yaml::from_str::<Profile>(&text).is_err());
    }

    #[test]
    fn inconsistent_values_are_refused() {
        let text = MINIMAL.replace("{rate_bps: 5000000}", "{rate_bps: 5000000, trace: x.up}");
        let p: Profile = serde_yaml::from_str(&text).unwrap();
        let err = p.build(Path::new("."), Utc::now(), &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
    }

    #[test]
    fn anchored_diurnal_clock_runs_compressed_from_the_anchor() {
        // Anchor at 00:00 UTC = 01:00 in Oslo (winter); 30 s later at 240x two hours
        // have passed: 03:00 local, whenever the emulator happens to start.
        let anchor = Utc.with_ymd_and_hms(2026, 1, 10, 0, 0, 0).unwrap();
        let text = format!(
            "{MINIMAL}timezone: Europe/Oslo\ndiurnal: {{factors: [{}], compression: 240, anchor: \"{}\"}}\n",
            ["1.0"; 24].join(", "),
            anchor.to_rfc3339()
        );
        let p: Profile = serde_yaml::from_str(&text).unwrap();
        let now = anchor + chrono::Duration::seconds(30);
        let spec = p.build(Path::new("."), now, &Overrides::default()).unwrap();
        let d = spec.env.diurnal.unwrap();
        assert_eq!(d.local_s_at(0), 3.0 * 3600.0);
        // Before the anchor the clock runs backwards the same way.
        assert_eq!(anchored_local_s(3600.0, anchor, anchor - chrono::Duration::seconds(15), 240.0),
                   0.0);
        // The command line's anchor wins over the profile's; start_hour with it is refused.
        let o = Overrides { anchor: Some(now), ..Overrides::default() };
        let d = p.build(Path::new("."), now, &o).unwrap().env.diurnal.unwrap();
        assert_eq!(d.local_s_at(0), 3600.0 + 30.0);
        let o = Overrides { start_hour: Some(5.0), ..Overrides::default() };
        let err = p.build(Path::new("."), now, &o).unwrap_err();
        assert!(err.to_string().contains("not both"), "{err}");
    }

    #[test]
    fn time_zones() {
        let noon = Utc.with_ymd_and_hms(2024, 1, 15, 12, 0, 0).unwrap();
        assert_eq!(local_seconds_of_day(None, noon).unwrap(), 12.0 * 3600.0);
        assert_eq!(local_seconds_of_day(Some("+01:00"), noon).unwrap(), 13.0 * 3600.0);
        assert_eq!(local_seconds_of_day(Some("-0530"), noon).unwrap(), 6.5 * 3600.0);
        // Oslo is UTC+1 in January, UTC+2 in July.
        assert_eq!(local_seconds_of_day(Some("Europe/Oslo"), noon).unwrap(), 13.0 * 3600.0);
        let july = Utc.with_ymd_and_hms(2024, 7, 15, 23, 30, 0).unwrap();
        assert_eq!(local_seconds_of_day(Some("Europe/Oslo"), july).unwrap(), 1.5 * 3600.0);
        assert!(local_seconds_of_day(Some("Mars/Olympus"), noon).is_err());
    }
}
