//! The binary on the repository's recorded capture (tests/unit/fixtures, the 3 s iperf3
//! transfer through a 6 Mbit/s tbf bottleneck): the counts tshark 4.0.17 gives on the
//! same file, and the document's shape the orchestrator reads. That every figure equals
//! the Python reference's is checked on the Python side (test_analysis_native.py).

use std::path::PathBuf;
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/unit/fixtures").join(name)
}

fn run(args: &[&str]) -> (i32, serde_json::Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_testbed-flows")).args(args).output().unwrap();
    let doc = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), doc)
}

#[test]
fn receiver_capture_counts_as_tshark_does() {
    let path = fixture("tcp-6mbit-rx.pcap");
    let (code, doc) = run(&[path.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!((doc["format"].as_str(), doc["frames"].as_u64()), (Some("pcap"), Some(1841)));
    let main = &doc["flows"][0];
    assert_eq!(main["server"][1], 5201);
    assert_eq!(main["data_packets"], 981);
    assert_eq!((main["retrans_packets"].as_i64(), main["dupacks"].as_i64()), (Some(38), Some(28)));
    let bins = main["arrival_bins"].as_array().unwrap();
    assert_eq!(bins.len(), 31); // 3 s in 100 ms bins
    let rtt = main["rtt_3whs_ns"].as_i64().unwrap();
    assert!(rtt > 0 && rtt < 5_000_000); // veths: microseconds
}

#[test]
fn wider_bins_hold_the_same_bytes() {
    let path = fixture("tcp-6mbit-tx.pcap");
    let (_, fine) = run(&[path.to_str().unwrap()]);
    let (_, coarse) = run(&["--bin-ns", "1000000000", path.to_str().unwrap()]);
    let sum = |d: &serde_json::Value| -> i64 {
        d["flows"][0]["arrival_bins"].as_array().unwrap().iter().map(|b| b.as_i64().unwrap()).sum()
    };
    assert_eq!(sum(&fine), sum(&coarse));
    assert_eq!(coarse["flows"][0]["arrival_bins"].as_array().unwrap().len(), 4);
}

#[test]
fn not_a_capture_and_bad_usage() {
    let this = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let this = this.to_str().unwrap();
    let (code, doc) = run(&[this]);
    assert_eq!(code, 0);
    assert!(doc["error"].as_str().unwrap().starts_with("not a pcap or pcapng file"));
    assert_eq!(run(&["--bin-ns", "0", this]).0, 2);
    assert_eq!(run(&[]).0, 2);
    assert_eq!(run(&["/nonexistent/capture.pcap"]).0, 1);
}

/// A raw-IP pcap record of a TCP segment from 10.0.0.1:40000 to 10.0.0.2:80.
fn segment(ts_ms: u64, seq: u32, payload: u16, flags: u8) -> Vec<u8> {
    let mut ip = vec![0x45, 0];
    ip.extend((40 + payload).to_be_bytes());
    ip.extend([0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    ip.extend(40000u16.to_be_bytes());
    ip.extend(80u16.to_be_bytes());
    ip.extend(seq.to_be_bytes());
    ip.extend([0, 0, 0, 0, 5 << 4, flags, 0, 100, 0, 0, 0, 0]);
    let mut rec = Vec::new();
    for v in [ts_ms / 1000, ts_ms % 1000 * 1000, 40, 40 + u64::from(payload)] {
        rec.extend((v as u32).to_le_bytes());
    }
    rec.extend(ip);
    rec
}

fn write_capture(name: &str, records: &[Vec<u8>]) -> PathBuf {
    let mut data: Vec<u8> = Vec::new();
    for v in [0xA1B2_C3D4u32, 0x0004_0002, 0, 0, 96, 101] {
        data.extend(v.to_le_bytes());
    }
    records.iter().for_each(|r| data.extend(r));
    let path = std::env::temp_dir().join(format!("{name}-{}.pcap", std::process::id()));
    std::fs::write(&path, data).unwrap();
    path
}

#[test]
fn a_packet_years_later_is_counted_not_binned() {
    let year_ms = 365 * 24 * 3600 * 1000;
    let records: Vec<Vec<u8>> = [0, 100, 5 * year_ms, 200]
        .iter()
        .enumerate()
        .map(|(i, &t)| segment(t, 1 + 1000 * i as u32, 1000, 0x10))
        .collect();
    let path = write_capture("flows-years", &records);
    let (code, doc) = run(&[path.to_str().unwrap()]);
    let (_, tight) = run(&["--max-flow-bins", "2", path.to_str().unwrap()]);
    let (bad, _) = run(&["--max-connections", "0", path.to_str().unwrap()]);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(code, 0);
    let flow = &doc["flows"][0];
    assert_eq!(flow["data_packets"], 4);
    assert_eq!(flow["unbinned_packets"], 1);
    assert_eq!(flow["arrival_bins"], serde_json::json!([1000, 1000, 1000]));
    let note = doc["notes"][0].as_str().unwrap();
    assert!(note.starts_with("1 data packet(s) of 1 connection(s) lie beyond"), "{note}");
    assert!(note.contains("(216000 bins a connection, 2097152 a capture)"), "{note}");
    assert_eq!(tight["flows"][0]["arrival_bins"], serde_json::json!([1000, 1000]));
    assert_eq!(tight["flows"][0]["unbinned_packets"], 2);
    assert_eq!(bad, 2);
}
