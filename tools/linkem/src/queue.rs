//! The drop-tail queue in front of the bottleneck.

use std::collections::VecDeque;

use crate::Nanos;

/// Default limit: 1000 packets, Linux's default `txqueuelen` for Ethernet
/// devices (and so the queue an operator-side interface typically has).
pub const DEFAULT_LIMIT_PACKETS: usize = 1000;

/// How much the queue may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many bytes of packets.
    Bytes(usize),
    /// At most this many packets.
    Packets(usize),
}

impl Default for QueueLimit {
    fn default() -> Self {
        QueueLimit::Packets(DEFAULT_LIMIT_PACKETS)
    }
}

/// A packet waiting for the bottleneck.
#[derive(Debug)]
pub struct Queued {
    /// The IP packet.
    pub data: Vec<u8>,
    /// When it arrived.
    pub arrival: Nanos,
    /// When it may start service at the earliest (radio promotion).
    pub eligible: Nanos,
}

/// A FIFO that refuses a packet when it would exceed its limit.
#[derive(Debug)]
pub struct DropTailQueue {
    limit: QueueLimit,
    packets: VecDeque<Queued>,
    bytes: usize,
}

impl DropTailQueue {
    /// An empty queue with `limit`.
    pub fn new(limit: QueueLimit) -> Self {
        Self {
            limit,
            packets: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Appends `q`, or gives it back when the queue is full.
    pub fn push(&mut self, q: Queued) -> Result<(), Queued> {
        let fits = match self.limit {
            QueueLimit::Bytes(max) => self.bytes + q.data.len() <= max,
            QueueLimit::Packets(max) => self.packets.len() < max,
        };
        if !fits {
            return Err(q);
        }
        self.bytes += q.data.len();
        self.packets.push_back(q);
        Ok(())
    }

    /// The packet at the head.
    pub fn front(&self) -> Option<&Queued> {
        self.packets.front()
    }

    /// Removes the head.
    pub fn pop(&mut self) -> Option<Queued> {
        let q = self.packets.pop_front()?;
        self.bytes -= q.data.len();
        Some(q)
    }

    /// Packets queued.
    pub fn len(&self) -> usize {
        self.packets.len()
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }

    /// Bytes queued.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(n: usize) -> Queued {
        Queued {
            data: vec![0; n],
            arrival: 0,
            eligible: 0,
        }
    }

    #[test]
    fn byte_limit_drops_tail() {
        let mut q = DropTailQueue::new(QueueLimit::Bytes(3000));
        assert!(q.push(pkt(1500)).is_ok());
        assert!(q.push(pkt(1500)).is_ok());
        assert!(q.push(pkt(1)).is_err());
        assert_eq!(q.bytes(), 3000);
        q.pop();
        assert!(q.push(pkt(100)).is_ok());
    }

    #[test]
    fn packet_limit_drops_tail() {
        let mut q = DropTailQueue::new(QueueLimit::Packets(1));
        assert!(q.push(pkt(10)).is_ok());
        assert!(q.push(pkt(10)).is_err());
        assert_eq!(q.len(), 1);
    }
}
