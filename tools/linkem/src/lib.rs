//! linkem: a user-space cellular link emulator.
//!
//! The kernel on the testbed's machines has no netem and no tc police, so
//! delay, jitter, loss, time-varying policing and trace-driven capacity are
//! emulated here, in user space, on packets read from TUN devices (the
//! approach of Mahimahi's mm-link, re-implemented).
//!
//! The crate is split in two layers:
//! - pure decision logic (`rate`, `trace`, `policer`, `queue`, `delay`,
//!   `radio`, `diurnal`, `handover`, `signal`, `route`, `link`, `emulator`): given a
//!   time in nanoseconds and the current state, it decides when each packet
//!   may leave. It never reads a clock, so it is unit-tested with a virtual
//!   clock;
//! - adapters (`tun`, `runner`, `state` file writer, `probe` traffic tools)
//!   that do the I/O and feed the pure layer with the monotonic clock.

pub mod clock;
pub mod delay;
pub mod diurnal;
pub mod emulator;
pub mod error;
pub mod handover;
pub mod link;
pub mod policer;
pub mod probe;
pub mod profile;
pub mod queue;
pub mod radio;
pub mod rate;
pub mod rng;
pub mod route;
pub mod runner;
pub mod signal;
pub mod state;
pub mod trace;
pub mod tun;

pub use error::Error;

/// A point in time or a duration, in nanoseconds since the emulator's epoch.
///
/// Plain integers keep the pure logic exact and cheap; 2^64 ns is ~584 years.
pub type Nanos = u64;

/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;
/// Nanoseconds per millisecond.
pub const NS_PER_MS: u64 = 1_000_000;

/// Time, in nanoseconds, to serialise `bytes` at `bps` bits per second.
///
/// Rounded up so that a saturated link never exceeds its rate.
pub fn transmission_ns(bytes: usize, bps: f64) -> Nanos {
    if bps <= 0.0 || !bps.is_finite() {
        return Nanos::MAX / 4;
    }
    ((bytes as f64) * 8.0 * NS_PER_S as f64 / bps).ceil() as Nanos
}
