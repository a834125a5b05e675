//! The propagation part of the link: base delay plus jitter.
//!
//! Jitter is uniform in [-jitter, +jitter] around the base delay, the
//! default distribution of Linux netem's `delay D J`. Without `reorder`, a
//! packet is never delivered before the one ahead of it (a cellular bearer
//! delivers in order: RLC in acknowledged mode reorders before delivery), so
//! jitter only stretches gaps; with `reorder`, each packet keeps its own
//! delay and may overtake others.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::rng::SplitMix64;
use crate::Nanos;

/// Base delay and jitter settings.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DelaySpec {
    /// One-way delay added to every packet.
    pub base: Nanos,
    /// Half-width of the uniform jitter.
    pub jitter: Nanos,
    /// Let jitter reorder packets.
    pub reorder: bool,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Timed {
    at: Nanos,
    seq: u64,
    data: Vec<u8>,
}

/// Packets in flight after the bottleneck.
#[derive(Debug)]
pub struct DelayLine {
    spec: DelaySpec,
    rng: SplitMix64,
    last_delivery: Nanos,
    seq: u64,
    fifo: VecDeque<(Nanos, Vec<u8>)>,
    heap: BinaryHeap<Reverse<Timed>>,
}

impl DelayLine {
    /// An empty delay line; `seed` drives the jitter.
    pub fn new(spec: DelaySpec, seed: u64) -> Self {
        Self {
            spec,
            rng: SplitMix64::new(seed),
            last_delivery: 0,
            seq: 0,
            fifo: VecDeque::new(),
            heap: BinaryHeap::new(),
        }
    }

    /// The packet left the bottleneck at `t`.
    pub fn push(&mut self, t: Nanos, data: Vec<u8>) {
        let mut at = t + self.spec.base;
        if self.spec.jitter > 0 {
            let offset = (self.rng.next_f64() * 2.0 - 1.0) * self.spec.jitter as f64;
            at = (at as i128 + offset as i128).max(t as i128) as Nanos;
        }
        if self.spec.reorder {
            self.seq += 1;
            self.heap.push(Reverse(Timed {
                at,
                seq: self.seq,
                data,
            }));
        } else {
            at = at.max(self.last_delivery);
            self.last_delivery = at;
            self.fifo.push_back((at, data));
        }
    }

    /// Moves every packet due at `now` into `out`.
    pub fn pop_due(&mut self, now: Nanos, out: &mut Vec<Vec<u8>>) {
        while self.fifo.front().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, d)) = self.fifo.pop_front() {
                out.push(d);
            }
        }
        while self.heap.peek().is_some_and(|Reverse(t)| t.at <= now) {
            if let Some(Reverse(t)) = self.heap.pop() {
                out.push(t.data);
            }
        }
    }

    /// When the next packet is due.
    pub fn next_due(&self) -> Option<Nanos> {
        let a = self.fifo.front().map(|(at, _)| *at);
        let b = self.heap.peek().map(|Reverse(t)| t.at);
        match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }

    /// Packets in flight.
    pub fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }

    /// True when nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NS_PER_MS;

    fn run(spec: DelaySpec) -> Vec<u8> {
        let mut d = DelayLine::new(spec, 3);
        for i in 0..200u8 {
            d.push(i as Nanos * 100_000, vec![i]);
        }
        let mut out = vec![];
        d.pop_due(Nanos::MAX, &mut out);
        out.into_iter().map(|v| v[0]).collect()
    }

    #[test]
    fn base_delay_is_added() {
        let mut d = DelayLine::new(
            DelaySpec {
                base: 20 * NS_PER_MS,
                ..Default::default()
            },
            1,
        );
        d.push(5, vec![1]);
        assert_eq!(d.next_due(), Some(5 + 20 * NS_PER_MS));
        let mut out = vec![];
        d.pop_due(20 * NS_PER_MS, &mut out);
        assert!(out.is_empty());
        d.pop_due(20 * NS_PER_MS + 5, &mut out);
        assert_eq!(out, vec![vec![1]]);
    }

    #[test]
    fn jitter_without_reorder_keeps_order() {
        let order = run(DelaySpec {
            base: 10 * NS_PER_MS,
            jitter: 5 * NS_PER_MS,
            reorder: false,
        });
        assert!(order.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn jitter_with_reorder_reorders() {
        let order = run(DelaySpec {
            base: 10 * NS_PER_MS,
            jitter: 5 * NS_PER_MS,
            reorder: true,
        });
        assert!(order.windows(2).any(|w| w[0] > w[1]));
        assert_eq!(order.len(), 200);
    }
}
