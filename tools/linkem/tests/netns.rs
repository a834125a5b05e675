//! End-to-end checks through real network namespaces (root only: elsewhere
//! they print SKIPPED with the reason, and under CI=true they fail; see
//! `tools/testsupport/require.rs`). Figures are measured at the receiving
//! socket.

mod common;

use common::*;
use linkem::trace::{Trace, OPPORTUNITY_BYTES};
use linkem::NS_PER_S;

const OPERATOR: &str = "operator: {mcc_mnc: \"001-01\", name: \"Test\", country: \"XX\"}\nrat: LTE\n";

fn profile(body: &str) -> String {
    format!("{OPERATOR}{body}")
}

fn sink_args(port: u16, duration_s: f64, bin_ms: u64) -> Vec<String> {
    vec![
        "probe".into(),
        "sink".into(),
        "--listen".into(),
        format!("0.0.0.0:{port}"),
        "--duration-s".into(),
        duration_s.to_string(),
        "--bin-ms".into(),
        bin_ms.to_string(),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn flood(t: &mut Topology, from: char, to: &str, rate_bps: f64, duration_s: f64, payload: usize) {
    let to = format!("{to}:5000");
    let rate = rate_bps.to_string();
    let d = duration_s.to_string();
    let p = payload.to_string();
    t.run(
        from,
        &["probe", "flood", "--to", &to, "--rate-bps", &rate, "--duration-s", &d, "--payload", &p],
    );
}

/// Runs a timed check a second time if the first fails. The emulator runs in user
/// space: a stall of the host of a few hundred milliseconds (a neighbour of this virtual
/// machine, a burst of other work) empties a 1 s bin that the link itself never would.
/// A link that is wrong fails both times.
fn timed(name: &str, check: fn()) {
    if std::panic::catch_unwind(check).is_ok() {
        return;
    }
    eprintln!("{name}: failed once; measuring again (a stall of the host fails a single try)");
    check();
}

fn assert_within(what: &str, got: f64, want: f64, tolerance: f64) {
    let err = (got - want).abs() / want;
    assert!(
        err <= tolerance,
        "{what}: got {got:.0}, want {want:.0} (error {:.2}% > {:.1}%)",
        err * 100.0,
        tolerance * 100.0
    );
    eprintln!("{what}: got {got:.0}, want {want:.0} (error {:.2}%)", err * 100.0);
}

#[test]
fn constant_rate_and_delay() {
    if skip("constant_rate_and_delay") {
        return;
    }
    timed("constant_rate_and_delay", constant_rate_and_delay_once);
}

fn constant_rate_and_delay_once() {
    let mut t = Topology::new();
    t.start_linkem(
        &profile("uplink: {rate_bps: 10000000, delay_ms: 15}\ndownlink: {rate_bps: 20000000, delay_ms: 15}\n"),
        &[],
    );
    // Uplink saturated at 1.5x its rate: 1 s bins at 10 Mbit/s within 2%.
    let sink = t.spawn('b', &strs(&sink_args(5000, 7.0, 1000)));
    std::thread::sleep(std::time::Duration::from_millis(200));
    flood(&mut t, 'a', SERVER, 15e6, 5.0, 1472);
    let r = finish(sink);
    let bins = numbers(&r["bins_ip_bytes"]);
    assert!(bins.len() >= 5, "too few bins: {bins:?}");
    for (i, b) in bins[1..4].iter().enumerate() {
        assert_within(&format!("uplink bin {}", i + 1), b * 8.0, 10e6, 0.02);
    }
    // Downlink at 20 Mbit/s.
    let sink = t.spawn('a', &strs(&sink_args(5000, 6.0, 1000)));
    std::thread::sleep(std::time::Duration::from_millis(200));
    flood(&mut t, 'b', NODE, 30e6, 4.0, 1472);
    let bins = numbers(&finish(sink)["bins_ip_bytes"]);
    for (i, b) in bins[1..3].iter().enumerate() {
        assert_within(&format!("downlink bin {}", i + 1), b * 8.0, 20e6, 0.02);
    }
    // Round trip: 15 ms each way plus serialisation of two 100-byte packets.
    t.background('b', &["probe", "echo", "--listen", "0.0.0.0:7", "--duration-s", "5"]);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let to = format!("{SERVER}:7");
    let p = t.run(
        'a',
        &["probe", "ping", "--to", &to, "--payload", "72", "--count", "30", "--interval-ms", "20"],
    );
    let median_ms = p["median_us"].as_f64().unwrap() / 1000.0;
    eprintln!("ping median {median_ms:.2} ms");
    assert!((30.0..33.0).contains(&median_ms), "median RTT {median_ms} ms, want 30-33");
}

/// Replays `file` on the uplink (or downlink) and compares each saturated
/// 1 s window with the trace's own capacity.
fn replay(file: &str, downlink: bool) {
    let Some(dir) = traces_dir(&format!("trace replay {file}")) else {
        return;
    };
    let path = dir.join(file);
    let trace = Trace::load(&path).expect("trace");
    let mut t = Topology::new();
    let section = format!("{{trace: {}, queue_packets: 2000}}", path.display());
    let body = if downlink {
        format!("uplink: {{}}\ndownlink: {section}\n")
    } else {
        format!("uplink: {section}\ndownlink: {{}}\n")
    };
    let state = t.start_linkem(&profile(&body), &[]);
    let epoch = read_state(&state)["epoch_monotonic_ns"].as_u64().unwrap();
    // Twice the best second of the trace keeps the queue from draining.
    let rate = (trace.peak_1s_bps() * 2.0).max(2e6);
    let (from, to, sink_ns) = if downlink { ('b', NODE, 'a') } else { ('a', SERVER, 'b') };
    let mut args = sink_args(5000, 9.0, 1000);
    args.extend(["--origin-ns".to_string(), epoch.to_string()]);
    let sink = t.spawn(sink_ns, &strs(&args));
    flood(&mut t, from, to, rate, 7.0, 1472);
    let bins = numbers(&finish(sink)["bins_ip_bytes"]);
    // Bins 0-1 hold the flood's start (queue filling), the last ones its end.
    let mut checked = 0;
    for (k, got) in bins.iter().enumerate().take(7).skip(2) {
        let a = k as u64 * NS_PER_S;
        let want = (trace.opportunities_between(a, a + NS_PER_S) as usize * OPPORTUNITY_BYTES) as f64;
        if want < 50.0 * OPPORTUNITY_BYTES as f64 {
            continue; // too few packets for a 2% comparison
        }
        assert_within(&format!("{file} second {k}"), *got, want, 0.02);
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} windows compared: {bins:?}");
}

#[test]
fn trace_replay_tmobile_lte_uplink() {
    if skip("trace_replay_tmobile_lte_uplink") {
        return;
    }
    timed("trace_replay_tmobile_lte_uplink", trace_replay_tmobile_lte_uplink_once);
}

fn trace_replay_tmobile_lte_uplink_once() {
    replay("TMobile-LTE-short.up", false);
}

#[test]
fn trace_replay_verizon_lte_downlink() {
    if skip("trace_replay_verizon_lte_downlink") {
        return;
    }
    timed("trace_replay_verizon_lte_downlink", trace_replay_verizon_lte_downlink_once);
}

fn trace_replay_verizon_lte_downlink_once() {
    replay("Verizon-LTE-short.down", true);
}

#[test]
fn ramp_reaches_90_percent_after_10_s() {
    if skip("ramp_reaches_90_percent_after_10_s") {
        return;
    }
    timed("ramp_reaches_90_percent_after_10_s", ramp_reaches_90_percent_after_10_s_once);
}

fn ramp_reaches_90_percent_after_10_s_once() {
    let mut t = Topology::new();
    t.start_linkem(
        &profile(
            "uplink:\n  rate_bps: 10000000\n  policing:\n    - {kind: ramp, start_fraction: 0.1, duration_s: 11}\ndownlink: {}\n",
        ),
        &[],
    );
    let sink = t.spawn('b', &strs(&sink_args(5000, 14.0, 100)));
    std::thread::sleep(std::time::Duration::from_millis(200));
    flood(&mut t, 'a', SERVER, 12e6, 13.5, 1472);
    let bins = numbers(&finish(sink)["bins_ip_bytes"]);
    let rates: Vec<f64> = bins.iter().map(|b| b * 8.0 * 10.0).collect();
    let first = rates.iter().position(|r| *r >= 0.9 * 10e6).expect("never reached 90%");
    let at = first as f64 / 10.0;
    eprintln!("ramp: 90% of the stable rate first reached at {at:.1} s; first bins {:?}", &rates[..5]);
    assert!((9.0..=11.0).contains(&at), "reached 90% at {at} s, want 10 +- 1 s");
    assert!(rates[2] < 0.3 * 10e6, "the ramp should start low: {:?}", &rates[..5]);
    let stable: f64 = rates[116..128].iter().sum::<f64>() / 12.0;
    assert_within("stable rate after the ramp", stable, 10e6, 0.03);
}

#[test]
fn peak_then_drop() {
    if skip("peak_then_drop") {
        return;
    }
    timed("peak_then_drop", peak_then_drop_once);
}

fn peak_then_drop_once() {
    let mut t = Topology::new();
    t.start_linkem(
        &profile(
            "uplink:\n  rate_bps: 10000000\n  policing:\n    - {kind: peak_then_drop, peak_bps: 8000000, peak_s: 3, stable_bps: 2000000}\ndownlink: {}\n",
        ),
        &[],
    );
    let sink = t.spawn('b', &strs(&sink_args(5000, 7.0, 100)));
    std::thread::sleep(std::time::Duration::from_millis(200));
    flood(&mut t, 'a', SERVER, 9e6, 6.5, 1472);
    let bins = numbers(&finish(sink)["bins_ip_bytes"]);
    let mean = |a: usize, b: usize| bins[a..b].iter().sum::<f64>() * 8.0 * 10.0 / (b - a) as f64;
    assert_within("peak", mean(2, 28), 8e6, 0.03);
    assert_within("after the drop", mean(35, 60), 2e6, 0.03);
}

/// Goodput of the first transfer over the median of the rest.
fn first_over_median(promotion_ms: u32) -> f64 {
    let mut t = Topology::new();
    t.start_linkem(
        &profile(&format!(
            "radio: {{idle_s: 1.0, promotion_delay_ms: {promotion_ms}}}\nuplink: {{rate_bps: 20000000, delay_ms: 10}}\ndownlink: {{rate_bps: 20000000, delay_ms: 10}}\n"
        )),
        &[],
    );
    t.background('b', &["probe", "tcp-serve", "--listen", "0.0.0.0:8080", "--duration-s", "20"]);
    // Let the radio fall idle.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let to = format!("{SERVER}:8080");
    let r = t.run('a', &["probe", "fetch", "--to", &to, "--size", "200000", "--count", "6"]);
    let g: Vec<f64> = r
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["goodput_bps"].as_f64().unwrap())
        .collect();
    let mut rest = g[1..].to_vec();
    rest.sort_by(|a, b| a.total_cmp(b));
    let median = rest[rest.len() / 2];
    eprintln!("promotion {promotion_ms} ms: goodputs {:?} -> g1/median {:.2}", g, g[0] / median);
    g[0] / median
}

#[test]
fn promotion_delay_slows_the_first_transfer() {
    if skip("promotion_delay_slows_the_first_transfer") {
        return;
    }
    timed("promotion_delay_slows_the_first_transfer", promotion_delay_slows_the_first_transfer_once);
}

fn promotion_delay_slows_the_first_transfer_once() {
    let with = first_over_median(400);
    assert!(with < 0.7, "with a 400 ms promotion g1/median = {with:.2}, want < 0.7");
    let without = first_over_median(0);
    assert!(without > 0.85, "without promotion g1/median = {without:.2}, want > 0.85");
}

#[test]
fn packet_rate_cap_holds_small_packets() {
    if skip("packet_rate_cap_holds_small_packets") {
        return;
    }
    timed("packet_rate_cap_holds_small_packets", packet_rate_cap_holds_small_packets_once);
}

fn packet_rate_cap_holds_small_packets_once() {
    let mut t = Topology::new();
    t.start_linkem(&profile("uplink: {pps_cap: 2000}\ndownlink: {}\n"), &[]);
    let sink = t.spawn('b', &strs(&sink_args(5000, 6.0, 1000)));
    std::thread::sleep(std::time::Duration::from_millis(200));
    // 40-byte IP packets (12 bytes of UDP payload) at 2.5x the cap.
    t.run(
        'a',
        &["probe", "flood", "--to", &format!("{SERVER}:5000"), "--pps", "5000", "--duration-s", "4.5", "--payload", "12"],
    );
    let r = finish(sink);
    let pkts = numbers(&r["bins_packets"]);
    for (i, p) in pkts[1..4].iter().enumerate() {
        assert_within(&format!("packets in second {}", i + 1), *p, 2000.0, 0.03);
    }
}

#[test]
fn link_state_moves_with_profile_and_handovers() {
    if skip("link_state_moves_with_profile_and_handovers") {
        return;
    }
    timed("link_state_moves_with_profile_and_handovers", link_state_moves_with_profile_and_handovers_once);
}

fn link_state_moves_with_profile_and_handovers_once() {
    let mut t = Topology::new();
    // One emulated hour per real second; a handover every 0.7 s.
    let state = t.start_linkem(
        &profile(
            "diurnal:\n  compression: 3600\n  start_hour: 0\n  factors: [1.0, 0.6, 0.4, 0.2, 0.1, 0.1, 0.1, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3]\nhandover: {every_s: 0.7, outage_ms: 50, bands: [B3, B20]}\nroute: {speed_kmh: 3600, waypoints: [[59.0, 10.0], [59.5, 10.0]]}\nuplink: {rate_bps: 5000000}\ndownlink: {rate_bps: 20000000}\n",
        ),
        &[
            "--state-udp",
            &format!("{ROUTER}:7001"),
            "--state-http",
            &format!("{ROUTER}:7002"),
        ],
    );
    let mut cells = std::collections::BTreeSet::new();
    let mut sinr = vec![];
    let mut rates = vec![];
    let mut handovers = vec![];
    let mut bands = std::collections::BTreeSet::new();
    let mut lats = vec![];
    for _ in 0..20 {
        let s = read_state(&state);
        cells.insert(s["cell_id"].as_u64().unwrap());
        handovers.push(s["handovers"].as_u64().unwrap());
        sinr.push(s["signal"]["sinr_db"].as_f64().unwrap());
        rates.push(s["downlink"]["rate_bps"].as_f64().unwrap());
        bands.insert(s["band"].as_str().unwrap().to_owned());
        lats.push(s["position"]["lat"].as_f64().unwrap());
        assert_eq!(s["position"]["lon"].as_f64(), Some(10.0));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    eprintln!("cells {cells:?}\nhandovers {handovers:?}\nsinr {sinr:?}\nrates {rates:?}");
    assert!(cells.len() >= 4, "cell id should change at each handover: {cells:?}");
    assert!(handovers.windows(2).all(|w| w[0] <= w[1]) && handovers[19] >= 4);
    assert!(rates[0] > rates[19] * 2.0, "capacity should fall with the load: {rates:?}");
    assert!(sinr[0] > sinr[19], "SINR should fall with the load: {sinr:?}");
    assert_eq!(bands.len(), 2, "the band should follow the serving cell: {bands:?}");
    // 1 km/s due north: ~0.009 degrees of latitude per 0.2 s read, for ~4 s.
    assert!(lats.windows(2).all(|w| w[0] < w[1]), "the node should move north: {lats:?}");
    assert!(lats[19] - lats[0] > 0.02, "{lats:?}");
    // The node can ask the router for the same document over UDP.
    let q = t.run('a', &["probe", "state", "--to", &format!("{ROUTER}:7001")]);
    assert_eq!(q["format_version"], 1);
    assert!(q["signal"]["rsrp_dbm"].as_f64().is_some());
    // And over HTTP.
    let h = t.run('a', &["probe", "state", "--http", "--to", &format!("{ROUTER}:7002")]);
    assert_eq!(h["rat"], "LTE");
    assert!(h["cell_id"].as_u64().is_some());
}
