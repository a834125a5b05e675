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
