//! A flow's self-inflicted delay samples, kept in memory bounded by their distinct
//! values rather than their number, and summarised exactly as the reference does.
//!
//! The reference keeps every sample (one per data segment sent once), which for an
//! hour-long capture is millions per flow. The summary needs only their sorted multiset:
//! the mean is `math.fsum` (correctly rounded, so independent of order) of the sorted
//! delays, the median and p95 are order statistics, and the delay is a non-decreasing
//! function of the sample, so sorting samples sorts delays. Samples are therefore
//! gathered in a buffer and, whenever it fills, sorted and merged into runs of
//! (value, count). Capture timestamps are microseconds (pcap) or coarser in practice,
//! so a flow's distinct delays number thousands, not millions.

use crate::fsum::{fsum, round_half_even};
use serde::Serialize;

/// Samples gathered before a merge: 32 KiB a flow, so that thousands of connections in one
/// capture stay within tens of megabytes.
const MIN_BUFFER: usize = 1 << 12;

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DelayStats {
    pub mean_s: f64,
    pub median_s: f64,
    pub p95_s: f64,
    pub samples: usize,
}

#[derive(Default)]
pub struct Samples {
    buffer: Vec<i64>,
    runs: Vec<(i64, u64)>, // sorted distinct values and how often each was seen
}

impl Samples {
    pub fn push(&mut self, ns: i64) {
        self.buffer.push(ns);
        // Compacting when the buffer outgrows the runs keeps the merges amortised.
        if self.buffer.len() >= MIN_BUFFER.max(self.runs.len()) {
            self.compact();
        }
    }

    fn compact(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        self.buffer.sort_unstable();
        let mut merged: Vec<(i64, u64)> = Vec::with_capacity(self.runs.len() + 64);
        let mut add = |v: i64, c: u64| match merged.last_mut() {
            Some((last, n)) if *last == v => *n += c,
            _ => merged.push((v, c)),
        };
        let (mut i, mut j) = (0, 0);
        while i < self.runs.len() || j < self.buffer.len() {
            if j == self.buffer.len() || (i < self.runs.len() && self.runs[i].0 <= self.buffer[j]) {
                add(self.runs[i].0, self.runs[i].1);
                i += 1;
            } else {
                add(self.buffer[j], 1);
                j += 1;
            }
        }
        merged.shrink_to_fit();
        self.runs = merged;
        self.buffer.clear();
        if self.buffer.capacity() > MIN_BUFFER.max(self.runs.len()) * 2 {
            self.buffer.shrink_to(MIN_BUFFER);
        }
    }

    /// The smallest sample: the connection's minimum per-ACK RTT.
    pub fn min(&mut self) -> Option<i64> {
        self.compact();
        self.runs.first().map(|&(v, _)| v)
    }

    /// Mean, median and p95 of `sample - base` in seconds, base being the handshake RTT
    /// (as the reference takes it: `rtt_s * 1e9`) or else the smallest sample.
    pub fn stats(&mut self, rtt_ns: Option<i64>) -> Option<DelayStats> {
        self.compact();
        let runs = &self.runs;
        let n: u64 = runs.iter().map(|&(_, c)| c).sum();
        if n == 0 {
            return None;
        }
        let delay: Box<dyn Fn(i64) -> f64> = match rtt_ns {
            Some(rtt) => {
                let base = rtt as f64 / 1e9 * 1e9;
                Box::new(move |s| (s as f64 - base) / 1e9)
            }
            None => {
                let base = runs[0].0;
                Box::new(move |s| (s - base) as f64 / 1e9)
            }
        };
        // The k-th smallest delay (0-based).
        let nth = |k: u64| {
            let mut seen = 0;
            for &(v, c) in runs {
                seen += c;
                if k < seen {
                    return delay(v);
                }
            }
            unreachable!("k < n")
        };
        let median = if n % 2 == 1 {
            nth(n / 2)
        } else {
            (nth(n / 2 - 1) + nth(n / 2)) / 2.0
        };
        let p95 = (round_half_even(0.95 * (n - 1) as f64) as u64).min(n - 1);
        let all = runs
            .iter()
            .flat_map(|&(v, c)| std::iter::repeat(delay(v)).take(c as usize));
        Some(DelayStats {
            mean_s: fsum(all) / n as f64,
            median_s: median,
            p95_s: nth(p95),
            samples: n as usize,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's computation, sample by sample.
    fn naive(samples: &[i64], rtt_ns: Option<i64>) -> Option<DelayStats> {
        if samples.is_empty() {
            return None;
        }
        let mut d: Vec<f64> = match rtt_ns {
            Some(rtt) => {
                let base = rtt as f64 / 1e9 * 1e9;
                samples.iter().map(|&s| (s as f64 - base) / 1e9).collect()
            }
            None => {
                let base = *samples.iter().min().unwrap();
                samples.iter().map(|&s| (s - base) as f64 / 1e9).collect()
            }
        };
        d.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let n = d.len();
        let median = if n % 2 == 1 {
            d[n / 2]
        } else {
            (d[n / 2 - 1] + d[n / 2]) / 2.0
        };
        let p95 = (round_half_even(0.95 * (n - 1) as f64) as usize).min(n - 1);
        Some(DelayStats {
            mean_s: fsum(d.iter().copied()) / n as f64,
            median_s: median,
            p95_s: d[p95],
            samples: n,
        })
    }

    #[test]
    fn runs_give_the_reference_summary_to_the_bit() {
        let mut state = 12345u64;
        for (count, spread) in [
            (1usize, 10u64),
            (2, 10),
            (7, 3),
            (1000, 50),
            (300_000, 20_000),
            (200_000, 5),
        ] {
            let samples: Vec<i64> = (0..count)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 33) % spread) as i64 * 1000 + 3_000_000
                })
                .collect();
            for rtt in [None, Some(2_999_000), Some(27_000)] {
                let mut s = Samples::default();
                samples.iter().for_each(|&v| s.push(v));
                assert_eq!(
                    s.stats(rtt),
                    naive(&samples, rtt),
                    "{count} samples, rtt {rtt:?}"
                );
            }
        }
        assert_eq!(Samples::default().stats(None), None);
    }

    #[test]
    fn min_is_the_smallest_sample() {
        let mut s = Samples::default();
        assert_eq!(s.min(), None);
        [7_000, 3_000, 9_000].iter().for_each(|&v| s.push(v));
        assert_eq!(s.min(), Some(3_000));
        assert_eq!(s.stats(None).map(|d| d.median_s), Some(4e-6));
    }

    #[test]
    fn memory_follows_distinct_values_not_samples() {
        let mut s = Samples::default();
        for i in 0..2_000_000i64 {
            s.push((i % 977) * 1000);
        }
        assert!(s.runs.len() <= 977 && s.buffer.capacity() <= 4 * MIN_BUFFER);
    }
}
