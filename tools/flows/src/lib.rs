//! The per-TCP-flow analysis of a packet capture, streamed from a file.
//!
//! This is the compiled core of the orchestrator's `orchestrator/analysis` package
//! (`pcap.py`, `packets.py`, `flows.py`), which stays the reference: every figure here
//! (bins, handshake RTT, retransmission and duplicate-ACK counts, self-inflicted delay,
//! completion time) must come out identical to it, and the orchestrator's tests check
//! that on every recorded capture. The definitions, and why they are what they are,
//! are documented there; this crate only says where it differs in *how*:
//!
//! - the file is read twice, front to back, holding one frame at a time: the first
//!   pass finds each connection's client, data direction, initial sequence number, first
//!   data segment and handshake; the second computes the figures that need those. Memory
//!   is per connection (its bins, its unacknowledged segments and its distinct delay
//!   samples, see [`samples`]), never per packet of the capture; bins and connections
//!   are capped by [`analysis::Bounds`], so a hostile capture (timestamps years apart,
//!   millions of connections) cannot make it allocate without limit.
//! - damage is reported exactly as the reference words it, so a note on a bundle reads
//!   the same whichever path produced it.

pub mod analysis;
pub mod decode;
pub mod fsum;
pub mod reader;
pub mod samples;
