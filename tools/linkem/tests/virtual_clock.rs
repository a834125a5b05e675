//! The pure emulator driven by a virtual clock: exact, fast checks of every
//! behaviour that the netns tests measure approximately.

use std::sync::Arc;

use linkem::delay::DelaySpec;
use linkem::diurnal::Diurnal;
use linkem::emulator::{Direction, Emulator, EmulatorSpec};
use linkem::handover::{HandoverSchedule, OutageMode};
use linkem::link::{Environment, Link, LinkSpec};
use linkem::policer::PolicerSpec;
use linkem::profile::Operator;
use linkem::queue::QueueLimit;
use linkem::radio::RadioSpec;
use linkem::rate::CapacitySpec;
use linkem::signal::CellPlan;
use linkem::trace::Trace;
use linkem::{Nanos, NS_PER_MS, NS_PER_S};

/// Feeds `link` one packet of `size` bytes every `gap` ns until `until`,
/// and returns each delivery as (time, size), polling at every event the
/// link asks for (a perfect event loop).
fn drive(link: &mut Link, size: usize, gap: Nanos, until: Nanos) -> Vec<(Nanos, usize)> {
    let mut out = vec![];
    let mut buf = vec![];
    let mut next_arrival = 0;
    loop {
        let wake = link.next_wakeup().unwrap_or(Nanos::MAX);
        let t = wake.min(next_arrival);
        if t >= until {
            break;
        }
        link.poll(t, &mut buf);
        out.extend(buf.drain(..).map(|p| (t, p.len())));
        if t == next_arrival {
            link.enqueue(t, vec![0; size], 0);
            next_arrival += gap;
        }
    }
    out
}

/// Bytes delivered per bin of `bin` ns.
fn bins(deliveries: &[(Nanos, usize)], bin: Nanos) -> Vec<usize> {
    let mut b = vec![];
    for (t, s) in deliveries {
        let i = (*t / bin) as usize;
        if b.len() <= i {
            b.resize(i + 1, 0);
        }
        b[i] += s;
    }
    b
}

fn link(spec: LinkSpec) -> Link {
    Link::new(spec, Arc::new(Environment::default()))
}

fn constant(bps: f64) -> LinkSpec {
    LinkSpec {
        capacity: CapacitySpec::Constant { bps },
        ..LinkSpec::passthrough()
    }
}

#[test]
fn constant_rate_is_exact_when_saturated() {
    let mut l = link(constant(10e6));
    // 1500-byte packets at 15 Mbit/s offered.
    let d = drive(&mut l, 1500, 800_000, 5 * NS_PER_S);
    let b = bins(&d, NS_PER_S);
    for bytes in &b[1..4] {
        // 10 Mbit/s = 1,250,000 B/s = 833.3 packets: 833 or 834.
        assert!((1_249_500..=1_251_000).contains(bytes), "{b:?}");
    }
    assert!(l.stats().dropped_queue > 0, "the queue should overflow");
}

#[test]
fn queue_limit_in_bytes_bounds_the_backlog() {
    let mut l = link(LinkSpec {
        queue: QueueLimit::Bytes(15_000),
        ..constant(1e6)
    });
    drive(&mut l, 1500, 1_000_000, NS_PER_S);
    assert!(l.backlog().1 <= 15_000);
    assert_eq!(l.backlog().0, 10);
}

#[test]
fn trace_capacity_is_replayed_per_window() {
    // 2 opportunities per ms for 500 ms, then 1 per ms, period 1000 ms.
    let mut text = String::new();
    for ms in 1..=1000 {
        text.push_str(&format!("{ms}\n"));
        if ms <= 500 {
            text.push_str(&format!("{ms}\n"));
        }
    }
    let trace = Arc::new(Trace::parse(&text).unwrap());
    let mut l = link(LinkSpec {
        capacity: CapacitySpec::Trace(trace.clone()),
        queue: QueueLimit::Packets(10_000),
        ..LinkSpec::passthrough()
    });
    let d = drive(&mut l, 1500, 100_000, 3 * NS_PER_S);
    let b = bins(&d, 500 * NS_PER_MS);
    // Every saturated window carries exactly the trace's opportunities:
    // about 1000 in first half-seconds, 500 in second halves.
    for (k, bytes) in b.iter().enumerate().take(6).skip(1) {
        let a = k as u64 * 500 * NS_PER_MS;
        let want = trace.opportunities_between(a, a + 500 * NS_PER_MS) * 1500;
        assert_eq!(*bytes as u64, want, "window {k}");
    }
    assert!(b[2] > 990 * 1500 && b[3] < 510 * 1500, "{b:?}");
}

#[test]
fn ramp_reaches_90_percent_near_10_s() {
    let mut l = link(LinkSpec {
        policers: vec![PolicerSpec::Ramp {
            stable_bps: 10e6,
            start_fraction: 0.1,
            duration: 11 * NS_PER_S,
        }],
        queue: QueueLimit::Packets(100_000),
        ..constant(10e6)
    });
    let d = drive(&mut l, 1500, 1_000_000, 14 * NS_PER_S);
    let b = bins(&d, 100 * NS_PER_MS);
    let rate = |i: usize| b[i] as f64 * 8.0 * 10.0;
    let first = (0..b.len()).find(|&i| rate(i) >= 9e6).unwrap();
    let at = first as f64 / 10.0;
    assert!((9.5..=10.0).contains(&at), "90% at {at} s");
    assert!(rate(1) < 1.5e6);
    assert!((rate(125) - 10e6).abs() < 0.02 * 10e6);
}

#[test]
fn new_flow_after_idle_ramps_again() {
    let mut l = link(LinkSpec {
        policers: vec![PolicerSpec::PeakThenDrop {
            peak_bps: 8e6,
            peak: NS_PER_S,
            stable_bps: 2e6,
        }],
        flow_idle: NS_PER_S,
        ..constant(10e6)
    });
    let mut out = vec![];
    // A packet at 5 s leaves at the stable rate after a busy second...
    drive(&mut l, 1500, 1_000_000, 2 * NS_PER_S);
    assert_eq!(l.stats().flows, 1);
    // ...and after 3 s of silence the next one is a new flow at peak rate.
    l.poll(10 * NS_PER_S, &mut out);
    l.enqueue(10 * NS_PER_S, vec![0; 1000], 0);
    assert_eq!(l.stats().flows, 2);
    assert_eq!(l.next_wakeup(), Some(10 * NS_PER_S + 1_000_000));
}

#[test]
fn token_bucket_burst_then_rate() {
    let mut l = link(LinkSpec {
        capacity: CapacitySpec::Unlimited,
        policers: vec![PolicerSpec::TokenBucket {
            rate_bps: 1e6,
            burst_bytes: 15_000.0,
        }],
        queue: QueueLimit::Packets(100_000),
        ..LinkSpec::passthrough()
    });
    let d = drive(&mut l, 1500, 100_000, 2 * NS_PER_S);
    // The first 10 packets pass in the first millisecond (burst)...
    assert!(d.iter().take(10).all(|(t, _)| *t < NS_PER_MS));
    // ...then the rate is 1 Mbit/s.
    let b = bins(&d, NS_PER_S);
    assert!((b[1] as f64 - 125_000.0).abs() <= 1500.0, "{b:?}");
}

#[test]
fn packet_rate_cap() {
    let mut l = link(LinkSpec {
        pps_cap: Some(2000.0),
        queue: QueueLimit::Packets(100_000),
        ..LinkSpec::passthrough()
    });
    let d = drive(&mut l, 40, 200_000, 3 * NS_PER_S);
    let per_s = bins(&d, NS_PER_S);
    assert_eq!(per_s[1] / 40, 2000);
}

#[test]
fn loss_is_seeded_and_near_the_probability() {
    let run = |seed| {
        let mut l = link(LinkSpec {
            loss: 0.1,
            seed,
            ..LinkSpec::passthrough()
        });
        drive(&mut l, 100, 100_000, NS_PER_S);
        l.stats().dropped_loss
    };
    assert_eq!(run(7), run(7));
    assert!((900..1100).contains(&run(7)), "{}", run(7));
}

#[test]
fn delay_and_jitter_keep_order() {
    let mut l = link(LinkSpec {
        delay: DelaySpec {
            base: 30 * NS_PER_MS,
            jitter: 10 * NS_PER_MS,
            reorder: false,
        },
        ..constant(100e6)
    });
    let d = drive(&mut l, 1500, NS_PER_MS, NS_PER_S);
    assert!(d.windows(2).all(|w| w[0].0 <= w[1].0));
    // Nothing arrives before base - jitter.
    assert!(d[0].0 >= 20 * NS_PER_MS);
}

fn emulator(radio: RadioSpec, env: Environment) -> Emulator {
    Emulator::new(EmulatorSpec {
        operator: Operator {
            mcc_mnc: "001-01".into(),
            name: "Test".into(),
            country: "XX".into(),
        },
        rat: "LTE".into(),
        uplink: constant(12e6),
        downlink: constant(12e6),
        radio,
        env,
        cells: CellPlan::new(vec![11, 22, 33], 1),
        route: None,
    })
}

#[test]
fn promotion_delays_only_the_first_packet_after_idle() {
    let mut e = emulator(
        RadioSpec {
            idle: NS_PER_S,
            promotion_delay: 300 * NS_PER_MS,
        },
        Environment::default(),
    );
    e.on_packet(Direction::Uplink, 0, vec![0; 1500]);
    // 300 ms promotion + 1 ms serialisation.
    assert_eq!(e.next_wakeup(), Some(301 * NS_PER_MS));
    let mut out = vec![];
    e.poll(Direction::Uplink, 301 * NS_PER_MS, &mut out);
    assert_eq!(out.len(), 1);
    // The reply, 100 ms later, finds the radio awake (shared by directions).
    e.on_packet(Direction::Downlink, 401 * NS_PER_MS, vec![0; 1500]);
    assert_eq!(e.next_wakeup(), Some(402 * NS_PER_MS));
    e.poll(Direction::Downlink, 402 * NS_PER_MS, &mut out);
    // After 2 s of silence: promoted again.
    e.on_packet(Direction::Uplink, 3 * NS_PER_S, vec![0; 1500]);
    assert_eq!(e.next_wakeup(), Some(3 * NS_PER_S + 301 * NS_PER_MS));
}

#[test]
fn handover_holds_or_drops_and_changes_cell() {
    for mode in [OutageMode::Hold, OutageMode::Drop] {
        let env = Environment {
            diurnal: None,
            handovers: HandoverSchedule {
                every: Some(NS_PER_S),
                at: vec![],
                outage: 100 * NS_PER_MS,
                mode,
            },
        };
        let mut e = emulator(RadioSpec::default(), env);
        assert_eq!(e.snapshot(500 * NS_PER_MS).cell_id, 11);
        e.on_packet(Direction::Uplink, NS_PER_S + 10 * NS_PER_MS, vec![0; 1500]);
        let snap = e.snapshot(NS_PER_S + 10 * NS_PER_MS);
        assert!(snap.in_outage);
        assert_eq!(snap.cell_id, 22);
        match mode {
            OutageMode::Hold => {
                assert_eq!(e.next_wakeup(), Some(NS_PER_S + 101 * NS_PER_MS));
            }
            OutageMode::Drop => {
                assert_eq!(e.next_wakeup(), None);
                assert_eq!(e.snapshot(2 * NS_PER_S).uplink.stats.dropped_outage, 1);
            }
        }
        assert_eq!(e.snapshot(3 * NS_PER_S + 500 * NS_PER_MS).cell_id, 11);
    }
}

#[test]
fn diurnal_load_scales_capacity_and_signal() {
    let mut factors = [1.0; 24];
    factors[1] = 0.25;
    let env = Environment {
        // 240x: one emulated hour every 15 s.
        diurnal: Some(Diurnal::new(factors, 240.0, 0.0)),
        handovers: HandoverSchedule::none(),
    };
    let mut e = emulator(RadioSpec::default(), env);
    let night = e.snapshot(NS_PER_S);
    let busy = e.snapshot(20 * NS_PER_S);
    assert_eq!(night.local_hour, Some(0));
    assert_eq!(busy.local_hour, Some(1));
    assert_eq!(night.uplink.rate_bps, Some(12e6));
    assert_eq!(busy.uplink.rate_bps, Some(3e6));
    assert!(busy.signal.sinr_db < night.signal.sinr_db);
    // A packet sent in hour 1 takes 4x as long: 1500 B at 3 Mbit/s = 4 ms.
    e.on_packet(Direction::Uplink, 20 * NS_PER_S, vec![0; 1500]);
    assert_eq!(e.next_wakeup(), Some(20 * NS_PER_S + 4 * NS_PER_MS));
}

#[test]
fn signal_follows_trace_capacity() {
    // 4 opportunities per ms in the first second, 1 per ms in the second.
    let mut text = String::new();
    for ms in 1..=2000 {
        let k = if ms <= 1000 { 4 } else { 1 };
        for _ in 0..k {
            text.push_str(&format!("{ms}\n"));
        }
    }
    let trace = Arc::new(Trace::parse(&text).unwrap());
    let mut spec = EmulatorSpec {
        operator: Operator {
            mcc_mnc: "001-01".into(),
            name: "Test".into(),
            country: "XX".into(),
        },
        rat: "LTE".into(),
        uplink: LinkSpec::passthrough(),
        downlink: LinkSpec::passthrough(),
        radio: RadioSpec::default(),
        env: Environment::default(),
        cells: CellPlan::new(vec![7], 1),
        route: None,
    };
    spec.downlink.capacity = CapacitySpec::Trace(trace);
    let e = Emulator::new(spec);
    let good = e.snapshot(0);
    let poor = e.snapshot(1_000 * NS_PER_MS);
    assert!(good.signal.rsrp_dbm > poor.signal.rsrp_dbm);
    assert!(good.signal.sinr_db > poor.signal.sinr_db);
    // Opportunities in the next second: ~4 or ~1 per ms of 1500 bytes.
    let near = |r: Option<f64>, want: f64| (r.unwrap() - want).abs() < 0.01 * want;
    assert!(near(good.downlink.rate_bps, 48e6), "{:?}", good.downlink.rate_bps);
    assert!(near(poor.downlink.rate_bps, 12e6), "{:?}", poor.downlink.rate_bps);
    assert_eq!(good.uplink.rate_bps, None);
}

#[test]
fn state_document_has_the_documented_fields() {
    let e = emulator(RadioSpec::default(), Environment::default());
    let doc = linkem::state::LinkState {
        format_version: linkem::state::FORMAT_VERSION,
        time_unix_ms: 0,
        epoch_monotonic_ns: 0,
        delivered: Default::default(),
        snapshot: e.snapshot(0),
    };
    let v: serde_json::Value = serde_json::from_str(&doc.to_json()).unwrap();
    for key in [
        "format_version",
        "time_unix_ms",
        "epoch_monotonic_ns",
        "delivered",
        "operator",
        "rat",
        "cell_id",
        "handovers",
        "in_outage",
        "signal",
        "local_hour",
        "diurnal_factor",
        "radio_idle",
        "promotions",
        "uplink",
        "downlink",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    for key in ["rssi_dbm", "rsrp_dbm", "rsrq_db", "sinr_db"] {
        assert!(v["signal"][key].is_number(), "signal.{key}");
    }
    assert_eq!(v["operator"]["mcc_mnc"], "001-01");
    assert!(v["uplink"]["stats"]["dropped_queue"].is_number());
}
