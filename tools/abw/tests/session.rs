//! Integration tests: real `abw recv` and `abw send` processes over
//! loopback (always) and over a tbf-shaped veth between two network
//! namespaces (root only: skipped with a message otherwise, failed under
//! CI=true; see `tools/testsupport/require.rs`).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_abw");

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `abw recv` (optionally inside a netns) and read its listening port.
fn start_server(prefix: &[&str], listen: &str) -> Server {
    let mut cmd = if prefix.is_empty() {
        Command::new(BIN)
    } else {
        let mut c = Command::new(prefix[0]);
        c.args(&prefix[1..]).arg(BIN);
        c
    };
    let mut child = cmd
        .args(["recv", "--listen", listen, "--idle-timeout", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("read listening line");
    let v: Value = serde_json::from_str(&line).expect("listening json");
    assert_eq!(v["event"], "listening");
    let port = v["tcp"].as_str().unwrap().rsplit(':').next().unwrap().parse().unwrap();
    Server { child, port }
}

/// Run `abw send` and return (exit success, JSON records).
fn send(prefix: &[&str], args: &[&str]) -> (bool, Vec<Value>, Duration) {
    let t0 = Instant::now();
    let mut cmd = if prefix.is_empty() {
        Command::new(BIN)
    } else {
        let mut c = Command::new(prefix[0]);
        c.args(&prefix[1..]).arg(BIN);
        c
    };
    let out = cmd.arg("send").args(args).output().expect("run client");
    let recs = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad json {l:?}: {e}")))
        .collect();
    (out.status.success(), recs, t0.elapsed())
}

fn check_estimate(r: &Value, method: &str) {
    assert_eq!(r["type"], "estimate", "{r}");
    assert_eq!(r["method"], method);
    for k in [
        "estimate_bps",
        "latency_s",
        "streams",
        "packets_sent",
        "packets_received",
        "bytes_sent",
        "bytes_received",
        "loss",
        "start",
        "end",
        "start_unix_s",
        "end_unix_s",
        "params",
    ] {
        assert!(!r[k].is_null(), "missing {k} in {r}");
    }
    assert!(r["estimate_bps"].as_f64().unwrap() > 0.0);
    assert!(r["packets_received"].as_u64().unwrap() > 0);
}

#[test]
fn loopback_methods_directions_and_errors() {
    let srv = start_server(&[], "127.0.0.1:0");
    let addr = format!("127.0.0.1:{}", srv.port);

    // uplink yaz, two estimates
    let (ok, recs, _) = send(&[], &["-s", &addr, "-n", "2", "--max-rate", "200M", "--estimate-pause-ms", "10"]);
    assert!(ok, "{recs:?}");
    assert_eq!(recs.len(), 2);
    for r in &recs {
        check_estimate(r, "yaz");
        assert_eq!(r["direction"], "uplink");
        assert!(!r["low_bps"].is_null() && !r["high_bps"].is_null());
    }

    // reverse (server sends)
    let (ok, recs, _) = send(&[], &["-s", &addr, "--reverse", "--max-rate", "200M"]);
    assert!(ok, "{recs:?}");
    check_estimate(&recs[0], "yaz");
    assert_eq!(recs[0]["direction"], "reverse");

    // pathload (small fleets) and spruce
    let (ok, recs, _) = send(
        &[],
        &["-s", &addr, "-m", "pathload", "--fleet-len", "2", "--stream-len", "30", "--max-rate", "200M"],
    );
    assert!(ok, "{recs:?}");
    check_estimate(&recs[0], "pathload");
    let (ok, recs, _) = send(&[], &["-s", &addr, "-m", "spruce", "--capacity", "100M", "--pairs", "30"]);
    assert!(ok, "{recs:?}");
    check_estimate(&recs[0], "spruce");
    assert!(recs[0]["low_bps"].is_null());

    // --duration produces estimates for about that long
    let (ok, recs, el) = send(&[], &["-s", &addr, "-d", "2", "--max-rate", "200M", "--estimate-pause-ms", "50"]);
    assert!(ok);
    assert!(!recs.is_empty());
    assert!(el < Duration::from_secs(6), "{el:?}");

    // spruce without capacity: config error, non-zero exit
    let (ok, recs, _) = send(&[], &["-s", &addr, "-m", "spruce"]);
    assert!(!ok);
    assert_eq!(recs[0]["kind"], "config");

    // busy: a second client while a session runs
    let a2 = addr.clone();
    let long = std::thread::spawn(move || send(&[], &["-s", &a2, "-d", "3", "--max-rate", "200M"]));
    std::thread::sleep(Duration::from_millis(700));
    let (ok, recs, _) = send(&[], &["-s", &addr, "--max-rate", "200M"]);
    assert!(!ok);
    assert_eq!(recs[0]["kind"], "busy", "{recs:?}");
    assert!(long.join().unwrap().0);
    drop(srv);

    // unreachable: nothing listens any more
    let (ok, recs, el) = send(&[], &["-s", &addr, "--connect-timeout", "2"]);
    assert!(!ok);
    assert_eq!(recs[0]["type"], "error");
    assert_eq!(recs[0]["kind"], "unreachable");
    assert!(el < Duration::from_secs(5));
}

#[test]
fn loopback_control_lost() {
    let mut srv = start_server(&[], "127.0.0.1:0");
    let addr = format!("127.0.0.1:{}", srv.port);
    let h = std::thread::spawn(move || send(&[], &["-s", &addr, "-n", "1000", "--max-rate", "200M", "--timeout", "3"]));
    std::thread::sleep(Duration::from_millis(800));
    srv.child.kill().unwrap();
    let (ok, recs, el) = h.join().unwrap();
    assert!(!ok);
    let last = recs.last().unwrap();
    assert_eq!(last["type"], "error", "{recs:?}");
    assert_eq!(last["kind"], "control_lost", "{last}");
    assert!(el < Duration::from_secs(15));
}

#[path = "../../testsupport/require.rs"]
mod require;

struct Netns {
    names: [String; 2],
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn ip(args: &[&str]) {
    let st = Command::new("ip").args(args).status().expect("ip");
    assert!(st.success(), "ip {args:?}");
}

#[test]
fn netns_tbf_bottleneck() {
    let why = require::not_root("network namespaces and tc");
    if !require::runnable("netns_tbf_bottleneck", why) {
        return;
    }
    let pid = std::process::id();
    let (s, r) = (format!("abw-t{pid}-s"), format!("abw-t{pid}-r"));
    let (vs, vr) = (format!("abwts{}", pid % 100000), format!("abwtr{}", pid % 100000));
    let _guard = Netns { names: [s.clone(), r.clone()] };
    ip(&["netns", "add", &s]);
    ip(&["netns", "add", &r]);
    ip(&["link", "add", &vs, "type", "veth", "peer", "name", &vr]);
    ip(&["link", "set", &vs, "netns", &s]);
    ip(&["link", "set", &vr, "netns", &r]);
    ip(&["-n", &s, "addr", "add", "10.78.0.1/30", "dev", &vs]);
    ip(&["-n", &r, "addr", "add", "10.78.0.2/30", "dev", &vr]);
    for (n, v) in [(&s, &vs), (&r, &vr)] {
        ip(&["-n", n, "link", "set", v, "up"]);
        ip(&["-n", n, "link", "set", "lo", "up"]);
    }
    let tbf = |rate: &str| {
        let st = Command::new("ip")
            .args(["netns", "exec", &s, "tc", "qdisc", "replace", "dev", &vs, "root", "tbf", "rate", rate, "burst", "3028", "limit", "250000"])
            .status()
            .unwrap();
        assert!(st.success());
    };
    tbf("10mbit");
    let pre_r = ["ip", "netns", "exec", r.as_str()];
    let pre_s = ["ip", "netns", "exec", s.as_str()];
    let srv = start_server(&pre_r, "10.78.0.2:7351");
    let addr = format!("10.78.0.2:{}", srv.port);

    // capacity 10 Mbit/s at L2 = 9.90 Mbit/s of 1400-byte IP packets
    let (ok, recs, _) = send(&pre_s, &["-s", &addr, "-n", "2"]);
    assert!(ok, "{recs:?}");
    for r in &recs {
        check_estimate(r, "yaz");
        let e = r["estimate_bps"].as_f64().unwrap();
        assert!((e - 9.9e6).abs() / 9.9e6 < 0.25, "estimate {e}");
        assert!(r["latency_s"].as_f64().unwrap() < 5.0);
    }
    // reverse direction crosses the unshaped return path: just works
    let (ok, recs, _) = send(&pre_s, &["-s", &addr, "--reverse", "--max-rate", "300M"]);
    assert!(ok, "{recs:?}");
    check_estimate(&recs[0], "yaz");

    // a link slower than the smallest probing rate
    tbf("200kbit");
    let (ok, recs, el) = send(&pre_s, &["-s", &addr, "--min-rate", "2M", "--max-rate", "50M"]);
    assert!(!ok, "{recs:?}");
    assert_eq!(recs.last().unwrap()["kind"], "link_too_slow", "{recs:?}");
    assert!(el < Duration::from_secs(30));
}
