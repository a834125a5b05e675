//! Harness for the integration tests that need root and network namespaces.
//!
//! Each test builds its own three-namespace topology with
//! `scripts/netns-demo.sh` (names `lkm-{a,r,b}-<pid>-<n>`), runs linkem in
//! the router namespace and the probe tools at both ends, and tears it all
//! down in `Drop`, so namespaces go away even when an assertion fails. Tests
//! hold a global lock: on a 2-core machine two emulators at once would
//! disturb each other's timing.

#![allow(dead_code)]

#[path = "../../../testsupport/require.rs"]
mod require;
pub use require::runnable;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

static LOCK: Mutex<()> = Mutex::new(());
static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Node (uplink sender) address.
pub const NODE: &str = "198.18.1.2";
/// Server address.
pub const SERVER: &str = "198.18.2.2";
/// Router address on the node's side.
pub const ROUTER: &str = "198.18.1.1";

/// Why these tests cannot run here, if they cannot.
pub fn skip_reason() -> Option<String> {
    if let Some(why) = require::not_root("network namespaces and TUN devices") {
        return Some(why);
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("iproute2 (`ip`) is not installed".into());
    }
    None
}

/// Returns true when the calling test must skip (it printed why); panics
/// under CI=true instead (see `testsupport/require.rs`).
pub fn skip(test: &str) -> bool {
    !runnable(test, skip_reason())
}

/// Folder of the shared cellular traces: `../shared/traces/cellular` beside
/// the repository (CI has it; a user's clone may not). None, after printing
/// why, when the calling test must skip; panics under CI=true when absent.
pub fn traces_dir(test: &str) -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/cellular");
    let present = d.join("README.md").exists();
    let why = (!present).then(|| "../shared/traces/cellular beside the repository is absent".into());
    runnable(test, why).then_some(d)
}

/// The linkem binary built for the tests.
pub fn linkem() -> &'static str {
    env!("CARGO_BIN_EXE_linkem")
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/netns-demo.sh")
}

/// One topology and the processes running in it.
pub struct Topology {
    pub tag: String,
    pub dir: PathBuf,
    children: Vec<Child>,
    _guard: MutexGuard<'static, ()>,
}

impl Topology {
    /// Builds a fresh topology.
    pub fn new() -> Self {
        let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let tag = format!("{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::SeqCst));
        let dir = std::env::temp_dir().join(format!("linkem-it-{tag}"));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let t = Self {
            tag,
            dir,
            children: vec![],
            _guard: guard,
        };
        let out = Command::new("bash")
            .arg(script())
            .args(["up", &t.tag])
            .output()
            .expect("running netns-demo.sh");
        assert!(
            out.status.success(),
            "netns-demo.sh up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        t
    }

    pub fn ns(&self, role: char) -> String {
        format!("lkm-{role}-{}", self.tag)
    }

    fn cmd(&self, role: char, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(role), linkem()]).args(args);
        c
    }

    /// Starts linkem in the router with `profile` (YAML text) and waits for
    /// its first state file; returns the state file's path.
    pub fn start_linkem(&mut self, profile: &str, extra: &[&str]) -> PathBuf {
        let p = self.dir.join("profile.yaml");
        std::fs::write(&p, profile).expect("writing profile");
        let state = self.dir.join("state.json");
        let _ = std::fs::remove_file(&state);
        let mut args = vec![
            "run",
            "--profile",
            p.to_str().unwrap(),
            "--uplink-tun",
            "lkup",
            "--downlink-tun",
            "lkdn",
            "--state-file",
            state.to_str().unwrap(),
            "--duration-s",
            "60",
            // The host may be busy (builds, other tests): keep departures on time.
            "--realtime",
            "20",
        ];
        args.extend_from_slice(extra);
        let child = self
            .cmd('r', &args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting linkem");
        self.children.push(child);
        let t0 = Instant::now();
        while !state.exists() {
            assert!(t0.elapsed() < Duration::from_secs(10), "linkem wrote no state file");
            std::thread::sleep(Duration::from_millis(20));
        }
        state
    }

    /// Starts a probe tool in namespace `role`; collect it with `finish`.
    pub fn spawn(&mut self, role: char, args: &[&str]) -> Child {
        self.cmd(role, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting probe")
    }

    /// Starts a server-like probe that lives until the topology is dropped.
    pub fn background(&mut self, role: char, args: &[&str]) {
        let child = self
            .cmd(role, args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting probe");
        self.children.push(child);
    }

    /// Runs a probe tool to the end and parses its JSON output.
    pub fn run(&mut self, role: char, args: &[&str]) -> Value {
        let child = self.spawn(role, args);
        finish(child)
    }
}

/// Waits for a probe and parses its JSON output.
pub fn finish(child: Child) -> Value {
    let out = child.wait_with_output().expect("waiting for probe");
    assert!(out.status.success(), "probe failed");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("probe output is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
    })
}

/// Reads the state file.
pub fn read_state(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).expect("reading state");
    serde_json::from_str(&text).expect("state is JSON")
}

/// A JSON array of numbers as f64s.
pub fn numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

impl Drop for Topology {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("bash").arg(script()).args(["down", &self.tag]).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
