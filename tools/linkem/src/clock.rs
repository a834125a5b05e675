//! The one place that reads the real clock.
//!
//! The pure layer takes `Nanos` since an epoch; this adapter provides the
//! epoch from CLOCK_MONOTONIC, which is shared by all network namespaces on a
//! host, so a traffic sink in another namespace can align its bins with the
//! emulator's epoch (published in the state file).

use crate::Nanos;

/// CLOCK_MONOTONIC in nanoseconds.
pub fn monotonic_ns() -> Nanos {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC
    // always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as Nanos * crate::NS_PER_S + ts.tv_nsec as Nanos
}

/// A monotonic clock whose zero is the moment it was created.
#[derive(Debug, Clone, Copy)]
pub struct EpochClock {
    epoch_monotonic_ns: Nanos,
}

impl EpochClock {
    /// Starts the epoch now.
    pub fn start() -> Self {
        Self {
            epoch_monotonic_ns: monotonic_ns(),
        }
    }

    /// The epoch as a CLOCK_MONOTONIC reading.
    pub fn epoch_monotonic_ns(&self) -> Nanos {
        self.epoch_monotonic_ns
    }

    /// Nanoseconds since the epoch.
    pub fn now(&self) -> Nanos {
        monotonic_ns().saturating_sub(self.epoch_monotonic_ns)
    }
}
