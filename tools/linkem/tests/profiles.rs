//! The shipped catalogue (deploy/profiles) parses, builds, and keeps the
//! shapes of the reference campaign.

use std::path::{Path, PathBuf};

use chrono::Utc;
use linkem::policer::PolicerSpec;
use linkem::profile::{Overrides, Profile};
use linkem::rate::CapacitySpec;

/// The catalogue's files. It is part of the repository, so a missing folder
/// is a failure, never a skip.
fn catalogue() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/profiles");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (the profile catalogue ships with the repository)",
                                   dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_profile_builds_with_sane_values() {
    let files = catalogue();
    assert!(files.len() >= 5, "{files:?}");
    for f in &files {
        let p = Profile::load(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let spec = p
            .build(f.parent().unwrap(), Utc::now(), &Overrides::default())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let o = &p.operator;
        assert!(
            o.mcc_mnc.len() >= 6 && o.mcc_mnc.chars().all(|c| c.is_ascii_digit() || c == '-'),
            "{}: mcc_mnc {:?}",
            f.display(),
            o.mcc_mnc
        );
        assert_eq!(o.country.len(), 2, "{}: country", f.display());
        assert!(p.source.is_some(), "{}: say where the numbers come from", f.display());
        // Uplink stable rate within 1-30 Mbit/s.
        let stable = spec
            .uplink
            .policers
            .iter()
            .find_map(|s| match s {
                PolicerSpec::PeakThenDrop { stable_bps, .. } | PolicerSpec::Ramp { stable_bps, .. } => {
                    Some(*stable_bps)
                }
                PolicerSpec::TokenBucket { .. } => None,
            })
            .or(match spec.uplink.capacity {
                CapacitySpec::Constant { bps } => Some(bps),
                _ => None,
            })
            .unwrap();
        assert!((1e6..=30e6).contains(&stable), "{}: uplink {stable}", f.display());
    }
}

#[test]
fn catalogue_has_the_reference_shapes() {
    let files = catalogue();
    let profiles: Vec<Profile> = files.iter().map(|f| Profile::load(f).unwrap()).collect();
    let has = |country: &str, rat: &str, pred: &dyn Fn(&Profile) -> bool| {
        profiles
            .iter()
            .any(|p| p.operator.country == country && p.rat == rat && pred(p))
    };
    let kinds = |p: &Profile| format!("{:?}", p.uplink.policing);
    assert!(has("IT", "3G", &|p| kinds(p).contains("PeakThenDrop")));
    assert!(has("IT", "LTE", &|p| kinds(p).contains("Ramp")));
    assert!(has("ES", "LTE", &|p| kinds(p).contains("Ramp")));
    assert!(has("SE", "LTE", &|p| p.uplink.policing.is_empty()));
    assert!(has("NO", "LTE", &|p| p.uplink.policing.is_empty() && p.diurnal.is_some()));
}

#[test]
fn every_profile_names_its_band_and_the_moving_node_travels() {
    let files = catalogue();
    for f in &files {
        let p = Profile::load(f).unwrap();
        assert!(p.band.is_some(), "{}: the emulated modem reports a band", f.display());
    }
    let train = files
        .iter()
        .find(|f| f.ends_with("no-telenor-lte-train.yaml"))
        .expect("the catalogue has a moving node");
    let p = Profile::load(train).unwrap();
    let spec = p.build(train.parent().unwrap(), Utc::now(), &Overrides::default()).unwrap();
    let emu = linkem::emulator::Emulator::new(spec);
    let s = linkem::NS_PER_S;
    let at = |t: u64| emu.snapshot(t * s);
    let (start, later) = (at(0), at(60));
    let (a, b) = (start.position.unwrap(), later.position.unwrap());
    // 60 s at 100 km/h is 1667 m along the line.
    let moved = linkem::route::haversine_m((a.lat, a.lon), (b.lat, b.lon));
    assert!((moved - 1666.7).abs() < 20.0, "moved {moved} m: {a:?} -> {b:?}");
    assert!((a.speed_mps - 27.78).abs() < 0.01, "{a:?}");
    // Handovers every 30 s cycle the bands B20, B20, B3.
    let bands: Vec<String> = (0..4).map(|k| at(k * 30 + 1).band.unwrap()).collect();
    assert_eq!(bands, ["B20", "B20", "B3", "B20"]);
    assert_ne!(at(1).cell_id, at(31).cell_id);
}
