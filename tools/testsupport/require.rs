//! One rule for tests that need something the machine may lack (root,
//! network namespaces, TUN, iproute2, the shared traces), shared by the
//! crates' integration tests through `#[path]` (no crate of its own):
//!
//! - under `CI=true` a missing requirement panics with its reason: a CI
//!   machine that cannot run the test must fail, not pass by returning;
//! - elsewhere the test returns early after printing `SKIPPED <test>: <why>`
//!   straight to stderr, past the test harness's capture, so the skip shows
//!   in `cargo test` output instead of passing silently.

#![allow(dead_code)]

use std::io::Write;

/// `CI=true` (or 1, yes), as CI services and `.ci/run` set it.
pub fn in_ci() -> bool {
    std::env::var("CI")
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "true" | "1" | "yes"))
        .unwrap_or(false)
}

/// True when `test` may run; `why_not` is the reason it cannot, if any.
/// Panics under CI; otherwise prints the skip and returns false.
pub fn runnable(test: &str, why_not: Option<String>) -> bool {
    let Some(why) = why_not else {
        return true;
    };
    if in_ci() {
        panic!("{test} cannot run here: {why} (CI=true: a missing requirement fails the run)");
    }
    // Not eprintln!: the harness captures that for passing tests, hiding the skip.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
    false
}

/// Why a test needing root cannot run, if it cannot.
pub fn not_root(what: &str) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    (unsafe { libc::geteuid() } != 0).then(|| format!("not root ({what} needs root)"))
}
