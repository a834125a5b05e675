//! Per-connection figures, computed in two streaming passes over a capture file (the
//! twin of `orchestrator/analysis/flows.py`; its module docstring defines each figure).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::path::Path;

use serde::Serialize;

use crate::decode::{decode, Addr, Packet, ACK, FIN, RST, SYN, TCP};
use crate::reader::{CaptureError, OpenError, Reader};
use crate::samples::{DelayStats, Samples};

/// The limits on what a capture may make the analysis hold (the reference's
/// `MAX_FLOW_BINS`, `MAX_CAPTURE_BINS` and `MAX_CONNECTIONS` in flows.py, whose module
/// docstring says why; the orchestrator passes its own values as flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Bins a connection may have.
    pub flow_bins: i64,
    /// Bins all of a capture's connections may have together, granted in order of
    /// first packet.
    pub capture_bins: i64,
    /// Connections analysed; TCP packets of later ones are not.
    pub connections: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            flow_bins: 216_000,
            capture_bins: 1 << 21,
            connections: 1 << 16,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    pub addr: Addr,
    pub port: u16,
}

impl Endpoint {
    fn src(p: &Packet) -> Endpoint {
        Endpoint {
            addr: p.src,
            port: p.sport,
        }
    }
    fn dst(p: &Packet) -> Endpoint {
        Endpoint {
            addr: p.dst,
            port: p.dport,
        }
    }
}

impl Serialize for Endpoint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeTuple;
        let hex: String = self
            .addr
            .as_slice()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut t = s.serialize_tuple(2)?;
        t.serialize_element(&hex)?;
        t.serialize_element(&self.port)?;
        t.end()
    }
}

#[derive(Debug, Clone, Copy)]
enum Handshake {
    WaitSyn,
    WaitSynAck { syn_ts: i64 },
    WaitAck { syn_ts: i64, synack_seq: u32 },
    Done(Option<i64>),
}

/// What the first pass learns of a connection: who is client, which side sends the
/// data, where its sequence numbers start, and the handshake RTT.
#[derive(Debug, Clone)]
struct Seen {
    a: Endpoint, // the first packet's source
    b: Endpoint,
    first_ts: i64,
    first_seq: u32,
    payload_from: [i64; 2], // from a, from b
    first_syn_seq: [Option<u32>; 2],
    first_data: [Option<(u32, i64)>; 2], // (seq, ts)
    last_data_ts: [Option<i64>; 2],      // the latest data packet's time
    syn: Option<(Endpoint, i64)>,        // client, and its SYN's time
    control: [[i64; 2]; 2],              // per side: segments with SYN, with FIN
    server: Endpoint,
    handshake: Handshake,
}

impl Seen {
    fn new(p: &Packet) -> Seen {
        let (a, b) = (Endpoint::src(p), Endpoint::dst(p));
        Seen {
            a,
            b,
            first_ts: p.ts_ns,
            first_seq: p.seq,
            payload_from: [0; 2],
            first_syn_seq: [None; 2],
            first_data: [None; 2],
            last_data_ts: [None; 2],
            syn: None,
            control: [[0; 2]; 2],
            server: b,
            handshake: Handshake::WaitSyn,
        }
    }

    fn see(&mut self, p: &Packet) {
        let src = Endpoint::src(p);
        for (i, side) in [self.a, self.b].into_iter().enumerate() {
            if src != side {
                continue;
            }
            self.payload_from[i] += p.payload;
            self.control[i][0] += i64::from(p.flags & SYN != 0);
            self.control[i][1] += i64::from(p.flags & FIN != 0);
            if p.flags & SYN != 0 && self.first_syn_seq[i].is_none() {
                self.first_syn_seq[i] = Some(p.seq);
            }
            if p.payload > 0 {
                if self.first_data[i].is_none() {
                    self.first_data[i] = Some((p.seq, p.ts_ns));
                }
                self.last_data_ts[i] =
                    Some(self.last_data_ts[i].map_or(p.ts_ns, |t| t.max(p.ts_ns)));
            }
        }
        let (syn, ack) = (p.flags & SYN != 0, p.flags & ACK != 0);
        self.handshake = match self.handshake {
            Handshake::WaitSyn if syn && !ack => {
                self.syn = Some((src, p.ts_ns));
                self.server = if src == self.a { self.b } else { self.a };
                Handshake::WaitSynAck { syn_ts: p.ts_ns }
            }
            Handshake::WaitSynAck { syn_ts } if syn && ack && src == self.server => {
                Handshake::WaitAck {
                    syn_ts,
                    synack_seq: p.seq,
                }
            }
            Handshake::WaitAck { syn_ts, synack_seq }
                if ack && !syn && Some(src) == self.client() =>
            {
                Handshake::Done((p.ack.wrapping_sub(synack_seq) == 1).then(|| p.ts_ns - syn_ts))
            }
            h => h,
        };
    }

    /// SYN and FIN segments beyond the first of each, per side (a connection from an
    /// endpoint to itself has one side: counted once, as the reference does).
    fn syn_fin_retrans(&self) -> i64 {
        let sides = if self.a == self.b { 1 } else { 2 };
        self.control[..sides]
            .iter()
            .flatten()
            .map(|n| (n - 1).max(0))
            .sum()
    }

    fn client(&self) -> Option<Endpoint> {
        self.syn.map(|(c, _)| c)
    }
}

struct Unwrap {
    raw: u32,
    value: i64,
}

impl Unwrap {
    fn at(&mut self, raw: u32) -> i64 {
        self.value += i64::from(raw.wrapping_sub(self.raw) as i32);
        self.raw = raw;
        self.value
    }
}

#[derive(Default)]
struct Stream {
    next: Option<i64>,
    holes: BinaryHeap<Reverse<(i64, i64)>>,
}

impl Stream {
    fn deliver(&mut self, start: i64, end: i64) -> i64 {
        let next = *self.next.get_or_insert(start);
        if end <= next {
            return 0;
        }
        if start > next {
            self.holes.push(Reverse((start, end)));
            return 0;
        }
        let mut reach = end;
        while let Some(&Reverse((s, e))) = self.holes.peek() {
            if s > reach {
                break;
            }
            reach = reach.max(e);
            self.holes.pop();
        }
        self.next = Some(reach);
        reach - next
    }
}

struct Pending {
    start: i64,
    end: i64,
    ts_ns: i64,
    valid: bool,
}

fn add(bins: &mut Vec<i64>, index: i64, nbytes: i64) {
    if index < 0 {
        return; // before bin 0
    }
    let i = index as usize;
    if i >= bins.len() {
        bins.resize(i + 1, 0);
    }
    bins[i] += nbytes;
}

/// The second pass over one connection.
struct Flow {
    client: Endpoint,
    server: Endpoint,
    data_src: Endpoint,
    start_ns: i64,
    syn_ts: Option<i64>,
    rtt_ns: Option<i64>,
    t0: i64,
    bin_ns: i64,
    max_bins: i64,
    unbinned: i64,
    seq_of: Unwrap,
    ack_of: Unwrap,
    arrival: Vec<i64>,
    delivered: Vec<i64>,
    stream: Stream,
    high: Option<i64>,
    pending: VecDeque<Pending>,
    samples: Samples,
    data_packets: i64,
    retrans: i64,
    retrans_bytes: i64,
    pure_acks: i64,
    dupacks: i64,
    payload: i64,
    last_ack: Option<i64>,
    last_window: i32,
    last_data_ns: Option<i64>,
    full_ack_ns: Option<i64>,
    syn_fin_retrans: i64,
}

/// The bin a packet at `ts_ns` falls in (in i128: the difference of two clamped times
/// fits an i64, but this costs nothing and cannot overflow).
fn bin_index(ts_ns: i64, t0: i64, bin_ns: i64) -> i128 {
    (i128::from(ts_ns) - i128::from(t0)).div_euclid(i128::from(bin_ns))
}

impl Flow {
    /// Bins this connection's data spans (0 without data at or after bin 0): what it
    /// uses of its grant when none of its data falls beyond it.
    fn bins_spanned(s: &Seen, side: usize, t0: i64, bin_ns: i64) -> i128 {
        s.last_data_ts[side].map_or(0, |last| (bin_index(last, t0, bin_ns) + 1).max(0))
    }

    fn new(s: &Seen, bin_ns: i64, grant: &mut i64, bounds: Bounds) -> Flow {
        let client = s.client().unwrap_or(s.a);
        let server = if client == s.a { s.b } else { s.a };
        let total: i64 = if s.a == s.b {
            s.payload_from[0]
        } else {
            s.payload_from.iter().sum()
        };
        let from_client = if client == s.a {
            s.payload_from[0]
        } else {
            s.payload_from[1]
        };
        let data_src = if from_client * 2 >= total {
            client
        } else {
            server
        };
        let side = usize::from(data_src != s.a);
        let first_data = s.first_data[side];
        let base = s.first_syn_seq[side]
            .or(first_data.map(|(seq, _)| seq))
            .unwrap_or(s.first_seq);
        let rtt_ns = match s.handshake {
            Handshake::Done(rtt) => rtt,
            _ => None,
        };
        let t0 = first_data.map_or(s.first_ts, |(_, ts)| ts);
        // `grant` is what is left of the capture's bins; take at most a flow's share,
        // and use up as many as the data spans (the reference: `analyse_bounded`).
        let max_bins = bounds.flow_bins.min(*grant);
        *grant -= Flow::bins_spanned(s, side, t0, bin_ns).min(i128::from(max_bins)) as i64;
        Flow {
            client,
            server,
            data_src,
            start_ns: s.first_ts,
            syn_ts: s.syn.map(|(_, ts)| ts),
            rtt_ns,
            t0,
            bin_ns,
            max_bins,
            unbinned: 0,
            seq_of: Unwrap {
                raw: base,
                value: 0,
            },
            ack_of: Unwrap {
                raw: base,
                value: 0,
            },
            arrival: Vec::new(),
            delivered: Vec::new(),
            stream: Stream::default(),
            high: None,
            pending: VecDeque::new(),
            samples: Samples::default(),
            data_packets: 0,
            retrans: 0,
            retrans_bytes: 0,
            pure_acks: 0,
            dupacks: 0,
            payload: 0,
            last_ack: None,
            last_window: -1,
            last_data_ns: None,
            full_ack_ns: None,
            syn_fin_retrans: s.syn_fin_retrans(),
        }
    }

    fn see(&mut self, p: &Packet) {
        if Endpoint::src(p) == self.data_src {
            if p.payload <= 0 {
                return;
            }
            let start = self.seq_of.at(p.seq);
            let end = start + p.payload;
            self.data_packets += 1;
            self.payload += p.payload;
            let index = bin_index(p.ts_ns, self.t0, self.bin_ns);
            let moved = self.stream.deliver(start, end);
            if index < i128::from(self.max_bins) {
                add(&mut self.arrival, index as i64, p.payload);
                add(&mut self.delivered, index as i64, moved);
            } else {
                self.unbinned += 1;
            }
            if self.high.is_some_and(|h| start < h) {
                self.retrans += 1;
                self.retrans_bytes += p.payload;
                for item in self.pending.iter_mut() {
                    // Karn: no RTT sample from a range sent twice
                    if item.start >= end {
                        break;
                    }
                    if item.end > start {
                        item.valid = false;
                    }
                }
            } else {
                self.pending.push_back(Pending {
                    start,
                    end,
                    ts_ns: p.ts_ns,
                    valid: true,
                });
            }
            self.high = Some(self.high.map_or(end, |h| h.max(end)));
            self.last_data_ns = Some(p.ts_ns);
        } else if p.flags & ACK != 0 {
            let ack = self.ack_of.at(p.ack);
            if p.payload == 0 && p.flags & (SYN | FIN | RST) == 0 {
                self.pure_acks += 1;
                if self.last_ack == Some(ack)
                    && i32::from(p.window) == self.last_window
                    && self.high.is_some_and(|h| ack < h)
                {
                    self.dupacks += 1;
                }
            }
            self.last_ack = Some(ack);
            self.last_window = i32::from(p.window);
            let covered = self
                .pending
                .iter()
                .take_while(|item| item.end <= ack)
                .count();
            // An ACK that also covers a repaired hole says when the hole filled, not
            // when the segments behind it arrived: no sample from any of them.
            let all_valid = self.pending.iter().take(covered).all(|item| item.valid);
            for item in self.pending.drain(..covered) {
                if all_valid {
                    self.samples.push(p.ts_ns - item.ts_ns);
                }
            }
            if self.high.is_some_and(|h| ack >= h) {
                self.full_ack_ns = Some(p.ts_ns);
            }
        }
    }

    fn finish(mut self) -> FlowFigures {
        let self_delay = self.samples.stats(self.rtt_ns);
        let min_rtt_ns = self.samples.min();
        let above_min_delay = self.samples.stats(None);
        let fct_ns = self.last_data_ns.map(|last| {
            let done = match self.full_ack_ns {
                Some(full) if full >= last => full,
                _ => last,
            };
            done - self.syn_ts.unwrap_or(self.start_ns)
        });
        FlowFigures {
            client: self.client,
            server: self.server,
            data_from_client: self.data_src == self.client,
            start_ns: self.start_ns,
            rtt_3whs_ns: self.rtt_ns,
            payload_bytes: self.payload,
            delivered_bytes: self.delivered.iter().sum(),
            data_packets: self.data_packets,
            retrans_packets: self.retrans,
            retrans_bytes: self.retrans_bytes,
            pure_acks: self.pure_acks,
            dupacks: self.dupacks,
            self_delay,
            fct_ns,
            bins_t0_ns: self.t0,
            arrival_bins: self.arrival,
            delivered_bins: self.delivered,
            unbinned_packets: self.unbinned,
            syn_fin_retrans: self.syn_fin_retrans,
            min_rtt_ns,
            above_min_delay,
        }
    }
}

/// One connection's figures. Times are integer nanoseconds: the caller divides, so its
/// floats are the reference's to the bit.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FlowFigures {
    pub client: Endpoint,
    pub server: Endpoint,
    pub data_from_client: bool,
    pub start_ns: i64,
    pub rtt_3whs_ns: Option<i64>,
    pub payload_bytes: i64,
    pub delivered_bytes: i64,
    pub data_packets: i64,
    pub retrans_packets: i64,
    pub retrans_bytes: i64,
    pub pure_acks: i64,
    pub dupacks: i64,
    pub self_delay: Option<DelayStats>,
    pub fct_ns: Option<i64>,
    pub bins_t0_ns: i64,
    pub arrival_bins: Vec<i64>,
    pub delivered_bins: Vec<i64>,
    /// Data packets beyond the bins' bound: counted, not binned.
    pub unbinned_packets: i64,
    /// SYN or FIN segments sent again by the same side.
    pub syn_fin_retrans: i64,
    /// The smallest per-ACK RTT sample (Karn's rule, as `self_delay`).
    pub min_rtt_ns: Option<i64>,
    /// The same samples above `min_rtt_ns`: self-inflicted delay without a handshake.
    pub above_min_delay: Option<DelayStats>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Damage {
    pub message: String,
    pub offset: u64,
    pub packets_read: u64,
}

impl From<CaptureError> for Damage {
    fn from(e: CaptureError) -> Self {
        Damage {
            message: e.message,
            offset: e.offset,
            packets_read: e.packets_read,
        }
    }
}

/// What a capture held and its connections, the one with most payload first.
#[derive(Debug, Clone, Serialize)]
pub struct CaptureFigures {
    pub format: &'static str,
    pub linktypes: Vec<u32>,
    pub snaplen: u32,
    pub frames: u64,
    pub packets: u64,
    pub undecoded: u64,
    pub damage: Option<Damage>,
    /// What the bounds left out, worded as the reference's `bound_notes`.
    pub notes: Vec<String>,
    pub flows: Vec<FlowFigures>,
}

/// What the bounds left out of a capture's figures, word for word the reference's
/// `bound_notes` (flows.py).
fn bound_notes(flows: &[FlowFigures], dropped_packets: u64, bounds: Bounds) -> Vec<String> {
    let mut notes = Vec::new();
    let unbinned: i64 = flows.iter().map(|f| f.unbinned_packets).sum();
    if unbinned > 0 {
        let hit = flows.iter().filter(|f| f.unbinned_packets > 0).count();
        notes.push(format!(
            "{unbinned} data packet(s) of {hit} connection(s) lie beyond the throughput bins' bound \
             ({} bins a connection, {} a capture): counted, not binned. Their timestamps jump \
             further than a run lasts; check the node's clock",
            bounds.flow_bins, bounds.capture_bins
        ));
    }
    if dropped_packets > 0 {
        let n = bounds.connections;
        notes.push(format!(
            "{dropped_packets} TCP packet(s) of connections past the first {n} were not analysed \
             (a capture holds at most {n} connections)"
        ));
    }
    notes
}

/// Every IP packet of the file, in order, until its end or its damage.
fn each_packet(
    reader: &mut Reader,
    limit: u64,
    mut f: impl FnMut(Option<&Packet>, u32),
) -> Option<CaptureError> {
    let mut frames = 0;
    while frames < limit {
        match reader.next_frame() {
            Ok(Some(frame)) => {
                frames += 1;
                let packet = if frame.caplen < 0 {
                    None
                } else {
                    decode(
                        reader.frame_data(),
                        frame.ts_ns,
                        frame.linktype,
                        frame.orig_len,
                    )
                };
                f(packet.as_ref(), frame.linktype);
            }
            Ok(None) => return None,
            Err(e) => return Some(e),
        }
    }
    None
}

fn key(p: &Packet) -> (Endpoint, Endpoint) {
    let (a, b) = (Endpoint::src(p), Endpoint::dst(p));
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

/// Analyse the capture at `path` in 100 ms (or `bin_ns`) bins, within `bounds`.
pub fn analyse_file(path: &Path, bin_ns: i64, bounds: Bounds) -> Result<CaptureFigures, OpenError> {
    assert!(bin_ns > 0, "bin_ns must be positive");
    let mut reader = Reader::open(path)?;
    let (format, snaplen) = (reader.format.name(), reader.snaplen);
    let mut index: HashMap<(Endpoint, Endpoint), usize> = HashMap::new();
    let mut seen: Vec<Seen> = Vec::new();
    let mut linktypes: Vec<u32> = Vec::new();
    let (mut frames, mut packets, mut dropped) = (0u64, 0u64, 0u64);
    let damage = each_packet(&mut reader, u64::MAX, |p, linktype| {
        frames += 1;
        if !linktypes.contains(&linktype) {
            linktypes.push(linktype);
        }
        let Some(p) = p else { return };
        packets += 1;
        if p.proto != TCP {
            return;
        }
        let k = key(p);
        let i = match index.get(&k) {
            Some(&i) => i,
            None if seen.len() >= bounds.connections => {
                dropped += 1;
                return;
            }
            None => {
                seen.push(Seen::new(p));
                index.insert(k, seen.len() - 1);
                seen.len() - 1
            }
        };
        seen[i].see(p);
    });
    let mut grant = bounds.capture_bins;
    let mut flows: Vec<Flow> = seen
        .iter()
        .map(|s| Flow::new(s, bin_ns, &mut grant, bounds))
        .collect();
    drop(seen);
    let mut reader = Reader::open(path)?;
    each_packet(&mut reader, frames, |p, _| {
        let Some(p) = p.filter(|p| p.proto == TCP) else {
            return;
        };
        if let Some(&i) = index.get(&key(p)) {
            flows[i].see(p); // else a connection past the bound
        }
    });
    let mut flows: Vec<FlowFigures> = flows.into_iter().map(Flow::finish).collect();
    let notes = bound_notes(&flows, dropped, bounds);
    flows.sort_by_key(|f| Reverse(f.payload_bytes)); // stable: ties keep capture order
    Ok(CaptureFigures {
        format,
        linktypes,
        snaplen,
        frames,
        packets,
        undecoded: frames - packets,
        damage: damage.map(Damage::from),
        notes,
        flows,
    })
}
