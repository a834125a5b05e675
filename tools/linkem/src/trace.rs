//! Mahimahi packet-delivery traces.
//!
//! Format (Mahimahi's traces/ folder, Winstein et al., NSDI 2013): one
//! integer millisecond per line, non-decreasing; each line is one
//! opportunity to deliver 1500 bytes; a millisecond repeated k times is k
//! opportunities. The trace wraps with a period equal to its last
//! timestamp, as in Mahimahi's `LinkQueue` (`base_timestamp += schedule.back()`).
//!
//! Opportunities are numbered by an absolute index `n` (cycle * len + i),
//! which makes "how many opportunities in [a, b)" a subtraction.

use std::path::Path;

use crate::{Error, Nanos, NS_PER_MS, NS_PER_S};

/// Bytes one opportunity can carry (Mahimahi's `PACKET_SIZE`).
pub const OPPORTUNITY_BYTES: usize = 1500;

/// A parsed trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    ms: Vec<u64>,
    period_ms: u64,
}

impl Trace {
    /// Parses the text of a trace; blank lines are ignored.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut ms = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let v: u64 = line
                .parse()
                .map_err(|_| format!("line {}: {line:?} is not an integer", i + 1))?;
            if let Some(&prev) = ms.last() {
                if v < prev {
                    return Err(format!("line {}: {v} is before {prev}", i + 1));
                }
            }
            ms.push(v);
        }
        let period_ms = *ms.last().ok_or("the trace is empty")?;
        if period_ms == 0 {
            return Err("the last timestamp is 0, so the trace has no period".into());
        }
        Ok(Self { ms, period_ms })
    }

    /// Reads and parses a trace file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|reason| Error::Trace {
            path: path.to_owned(),
            reason,
        })
    }

    /// Opportunities in one period.
    pub fn len(&self) -> usize {
        self.ms.len()
    }

    /// Never true for a parsed trace; here for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.ms.is_empty()
    }

    /// Length of one period in milliseconds.
    pub fn period_ms(&self) -> u64 {
        self.period_ms
    }

    /// Mean capacity in bits per second.
    pub fn mean_bps(&self) -> f64 {
        (self.ms.len() * OPPORTUNITY_BYTES * 8) as f64 * 1000.0 / self.period_ms as f64
    }

    /// Time of opportunity `n`, in ns since the trace's start.
    pub fn time_ns(&self, n: u64) -> Nanos {
        let len = self.ms.len() as u64;
        (n / len * self.period_ms + self.ms[(n % len) as usize]) * NS_PER_MS
    }

    /// Index of the first opportunity at or after `t` ns.
    pub fn first_at_or_after(&self, t: Nanos) -> u64 {
        let t_ms = t.div_ceil(NS_PER_MS);
        let len = self.ms.len() as u64;
        let cycle = t_ms / self.period_ms;
        let rem = t_ms % self.period_ms;
        if rem == 0 && cycle > 0 {
            // Entries equal to the period end the previous cycle at exactly
            // this millisecond.
            let idx = self.ms.partition_point(|&m| m < self.period_ms) as u64;
            return (cycle - 1) * len + idx;
        }
        // The last entry equals the period and rem < period, so idx < len.
        let idx = self.ms.partition_point(|&m| m < rem) as u64;
        cycle * len + idx
    }

    /// Number of opportunities in [a, b).
    pub fn opportunities_between(&self, a: Nanos, b: Nanos) -> u64 {
        self.first_at_or_after(b)
            .saturating_sub(self.first_at_or_after(a))
    }

    /// Highest capacity over any 1 s window aligned to a millisecond, in bits/s.
    ///
    /// Used as the "best radio conditions" reference for signal figures.
    pub fn peak_1s_bps(&self) -> f64 {
        let mut best = 0u64;
        let start_ms = 0u64;
        let mut t = start_ms;
        while t < self.period_ms {
            let n = self.opportunities_between(t * NS_PER_MS, t * NS_PER_MS + NS_PER_S);
            best = best.max(n);
            t += 100;
        }
        (best as usize * OPPORTUNITY_BYTES * 8) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_wraps() {
        let t = Trace::parse("1\n1\n3\n\n5\n").unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t.period_ms(), 5);
        assert_eq!(t.time_ns(0), NS_PER_MS);
        assert_eq!(t.time_ns(3), 5 * NS_PER_MS);
        // Second cycle starts at 5 ms.
        assert_eq!(t.time_ns(4), 6 * NS_PER_MS);
        assert_eq!(t.time_ns(7), 10 * NS_PER_MS);
    }

    #[test]
    fn first_at_or_after_rounds_up_to_the_next_millisecond() {
        let t = Trace::parse("1\n1\n3\n5\n").unwrap();
        assert_eq!(t.first_at_or_after(0), 0);
        assert_eq!(t.first_at_or_after(NS_PER_MS), 0);
        assert_eq!(t.first_at_or_after(NS_PER_MS + 1), 2);
        assert_eq!(t.first_at_or_after(5 * NS_PER_MS), 3);
        assert_eq!(t.first_at_or_after(5 * NS_PER_MS + 1), 4);
        // 2 opportunities at 1 ms and one at 3 ms in [0, 4 ms).
        assert_eq!(t.opportunities_between(0, 4 * NS_PER_MS), 3);
    }

    #[test]
    fn rejects_bad_traces() {
        assert!(Trace::parse("").is_err());
        assert!(Trace::parse("0\n0\n").is_err());
        assert!(Trace::parse("5\n3\n").is_err());
        assert!(Trace::parse("x\n").is_err());
    }

    #[test]
    fn mean_rate_of_one_opportunity_per_ms_is_12_mbit() {
        let text: String = (1..=1000).map(|i| format!("{i}\n")).collect();
        let t = Trace::parse(&text).unwrap();
        assert!((t.mean_bps() - 12e6).abs() < 1.0);
        assert!((t.peak_1s_bps() - 12e6).abs() < 1.0);
    }
}
