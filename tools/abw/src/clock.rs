//! Clocks and precise pacing.
//!
//! Pacing sleeps until shortly before the target instant and busy-waits
//! (spins) for the last `spin` microseconds: `nanosleep` on a loaded Linux
//! host wakes 50-100 us late (timer slack, scheduler latency), which at
//! 100 Mbit/s is the whole gap between two 1400-byte probes. The sleep part
//! keeps the CPU free for long gaps; the spin part gives ~1 us precision.
//! The default spin window (150 us) was chosen from the wake-up lateness
//! seen on the 2-core bench machine; raise `--spin-us` on noisier hosts.
//! The process timer slack is set to 1 ns so the sleep part is not rounded
//! up by the default 50 us slack.

use std::time::{Duration, Instant};

/// Wall-clock time in ns since the Unix epoch (CLOCK_REALTIME, vDSO).
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Wall-clock seconds since the Unix epoch as f64.
pub fn unix_s() -> f64 {
    realtime_ns() as f64 / 1e9
}

/// Reduce the kernel timer slack of this thread to 1 ns (Linux only;
/// silently ignored elsewhere or on failure).
pub fn tighten_timer_slack() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes a plain integer argument.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Wait until `deadline`: sleep until `spin` before it, then busy-wait.
pub fn pace_until(deadline: Instant, spin: Duration) {
    let now = Instant::now();
    if deadline <= now {
        return;
    }
    let left = deadline - now;
    if left > spin {
        std::thread::sleep(left - spin);
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

/// Sleep for a (possibly fractional) number of seconds; negative or NaN
/// values sleep not at all.
pub fn sleep_s(s: f64) {
    if s.is_finite() && s > 0.0 {
        std::thread::sleep(Duration::from_secs_f64(s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_is_not_early() {
        tighten_timer_slack();
        let start = Instant::now();
        let target = start + Duration::from_micros(700);
        pace_until(target, Duration::from_micros(150));
        assert!(Instant::now() >= target);
    }
}
