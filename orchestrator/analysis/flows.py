"""Per-TCP-connection figures from a capture, as the seeds' studies report them.

- Throughput in 100 ms bins, two ways: payload bytes by arrival at the capture point
  (``arrival_bins``: what TAT's receiver-side bins measure, retransmissions included)
  and in-order delivery (``delivered_bins``: how far the contiguous byte stream moved,
  which is what the receiving application could read, so it matches iperf3's own
  receiver bins even while a loss is being repaired).
- Three-way-handshake RTT: time of the handshake's final ACK minus time of the SYN.
  Seen from the client that is SYN->SYN/ACK plus the client's turnaround, seen from the
  server it is SYN/ACK->ACK plus the server's; either way one round trip, wherever the
  capture was taken.
- Retransmissions: data segments that start below the highest sequence number already
  seen (so re-sent or reordered data), as a percentage of data segments. Duplicate
  ACKs: pure ACKs (no payload, no SYN/FIN/RST) repeating the previous ACK number and
  window while data is outstanding (Wireshark's definition), as a percentage of pure
  ACKs.
- Self-inflicted delay: for each data segment sent once (Karn's rule: retransmitted
  ranges give no sample, nor do segments first acknowledged together with a repaired
  hole), the time to the first ACK covering it, minus the handshake RTT. On a
  sender-side capture this is the queueing the flow builds in the bottleneck
  (bufferbloat, the BBR vs CUBIC comparison); on a receiver-side capture it is only the
  receiver's ACK delay. The same samples above the connection's own minimum
  (``above_min_delay``, ``min_rtt_s``: the smallest per-ACK RTT) need no handshake and
  do not go negative when the handshake's turnaround exceeded a data segment's RTT:
  the cca-compare study's self-inflicted delay.
- Flow completion time: SYN (or the first packet) to the first ACK covering the last
  data byte (or the last data packet when that ACK was not captured).
- SYN/FIN retransmissions: segments carrying SYN (SYN/ACK included) or FIN beyond the
  first of each from the same side. Such a flow's completion time holds a
  retransmission timeout of the handshake or the teardown, not the path's behaviour:
  the short-flows study excludes it (after Garcia et al.).

Bounds (a capture comes from a node, which is not trusted: docs/security.md). Bins are a
dense list up to the latest packet, so one packet stamped years later would ask for
billions of them; and every connection costs memory of its own. Hence three limits,
the same in the compiled tool (the orchestrator passes these to it as flags):
:data:`MAX_FLOW_BINS` bins a connection, :data:`MAX_CAPTURE_BINS` for all of a
capture's connections together (granted in order of first packet), and
:data:`MAX_CONNECTIONS` connections a capture. A data packet beyond its connection's
bins is counted in every other figure but not binned, and packets of connections past
the limit are not analysed; the capture gets a note saying how many (:func:`bound_notes`).
"""

from __future__ import annotations

import heapq
import ipaddress
import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from orchestrator.analysis.packets import ACK, FIN, RST, SYN, TCP, Packet

DEFAULT_BIN_S = 0.1  # TAT's receiver-side bins (DESIGN: "TAT sampled in 100 ms bins")
#: Bins a connection may have: 6 h of 100 ms bins, longer than any run lasts.
MAX_FLOW_BINS = 216_000
#: Bins all of a capture's connections may have together: 58 h of 100 ms bins, so the
#: tool's two lists of 8-byte bins stay within 32 MiB whatever the capture holds.
MAX_CAPTURE_BINS = 1 << 21
#: Connections a capture may have: a measurement's capture holds a handful; this many
#: cost the tool a few tens of MiB.
MAX_CONNECTIONS = 1 << 16
_SEQ_SPACE = 1 << 32
_HALF = 1 << 31


class Endpoint(NamedTuple):
    addr: bytes
    port: int

    def __str__(self) -> str:
        ip = ipaddress.ip_address(self.addr)
        return f"[{ip}]:{self.port}" if ip.version == 6 else f"{ip}:{self.port}"


class Connection(NamedTuple):
    """A TCP connection: the client is the SYN's sender (else the first packet's)."""

    client: Endpoint
    server: Endpoint


@dataclass(frozen=True)
class DelayStats:
    mean_s: float
    median_s: float
    p95_s: float
    samples: int


@dataclass(frozen=True)
class FlowStats:
    connection: Connection
    data_from_client: bool  # the direction that carried more payload
    start_ns: int  # first packet of the connection
    rtt_3whs_s: float | None  # None without a captured handshake
    payload_bytes: int  # data direction, retransmissions included
    delivered_bytes: int  # contiguous stream advance (unique bytes in order)
    data_packets: int
    retrans_packets: int
    retrans_bytes: int  # payload of those segments: robust to TSO super-packets in captures
    pure_acks: int
    dupacks: int
    self_delay: DelayStats | None
    fct_s: float | None
    bin_s: float
    bins_t0_ns: int  # start of bin 0: the first data packet unless given
    arrival_bins: list[int]  # payload bytes per bin by arrival
    delivered_bins: list[int]  # in-order delivered bytes per bin
    unbinned_packets: int = 0  # data packets beyond the bins' bound (max_bins)
    syn_fin_retrans: int = 0  # SYN or FIN segments sent again by the same side
    min_rtt_s: float | None = None  # the smallest per-ACK RTT sample
    above_min_delay: DelayStats | None = None  # the samples above ``min_rtt_s``

    @property
    def retrans_pct(self) -> float:
        return 100.0 * self.retrans_packets / self.data_packets if self.data_packets else 0.0

    @property
    def retrans_bytes_pct(self) -> float:
        return 100.0 * self.retrans_bytes / self.payload_bytes if self.payload_bytes else 0.0

    @property
    def dupack_pct(self) -> float:
        return 100.0 * self.dupacks / self.pure_acks if self.pure_acks else 0.0

    def rates_bps(self, *, delivered: bool = False) -> list[float]:
        """Bits per second in each bin."""
        bins = self.delivered_bins if delivered else self.arrival_bins
        return [b * 8 / self.bin_s for b in bins]


def tcp_connections(packets: Iterable[Packet]) -> dict[Connection, list[Packet]]:
    """Group TCP packets by connection, in capture order."""
    return _connections(packets, limit=None)[0]


def _connections(packets: Iterable[Packet], *, limit: int | None
                 ) -> tuple[dict[Connection, list[Packet]], int]:
    """:func:`tcp_connections` of at most ``limit`` connections (the first to appear),
    and how many TCP packets belong to connections past it."""
    by_pair: dict[tuple[Endpoint, Endpoint], list[Packet]] = {}
    dropped = 0
    for p in packets:
        if p.proto != TCP:
            continue
        a, b = Endpoint(p.src, p.sport), Endpoint(p.dst, p.dport)
        key = (a, b) if (a, b) in by_pair else (b, a) if (b, a) in by_pair else None
        if key is None:
            if limit is not None and len(by_pair) >= limit:
                dropped += 1
                continue
            key = (a, b)
            by_pair[key] = []
        by_pair[key].append(p)
    out: dict[Connection, list[Packet]] = {}
    for (a, b), pkts in by_pair.items():
        syn = next((p for p in pkts if p.flags & SYN and not p.flags & ACK), None)
        client = Endpoint(syn.src, syn.sport) if syn is not None else a
        out[Connection(client, b if client == a else a)] = pkts
    return out, dropped


def analyse_capture(packets: Iterable[Packet], *, bin_s: float = DEFAULT_BIN_S) -> list[FlowStats]:
    """Every TCP connection of a capture, the one with most payload first (within the
    bounds; :func:`analyse_bounded` also says what they left out)."""
    return analyse_bounded(packets, bin_s=bin_s)[0]


def analyse_bounded(
    packets: Iterable[Packet],
    *,
    bin_s: float = DEFAULT_BIN_S,
    max_flow_bins: int = MAX_FLOW_BINS,
    max_capture_bins: int = MAX_CAPTURE_BINS,
    max_connections: int = MAX_CONNECTIONS,
) -> tuple[list[FlowStats], list[str]]:
    """:func:`analyse_capture` and the notes of :func:`bound_notes`. Bins are granted
    to connections in order of first packet: each gets at most ``max_flow_bins`` of
    what is left of ``max_capture_bins``, and uses up as many as its data spans (all of
    its grant when some of its data fell beyond it)."""
    grouped, dropped = _connections(packets, limit=max_connections)
    left = max_capture_bins
    flows = []
    for conn, pkts in grouped.items():
        grant = min(max_flow_bins, left)
        flow = analyse_flow(conn, pkts, bin_s=bin_s, max_bins=grant)
        left -= grant if flow.unbinned_packets else len(flow.arrival_bins)
        flows.append(flow)
    notes = bound_notes(flows, dropped, max_flow_bins=max_flow_bins,
                        max_capture_bins=max_capture_bins, max_connections=max_connections)
    return sorted(flows, key=lambda f: f.payload_bytes, reverse=True), notes


def bound_notes(flows: list[FlowStats], dropped_packets: int, *, max_flow_bins: int,
                max_capture_bins: int, max_connections: int) -> list[str]:
    """What the bounds left out of a capture's figures, worded as the compiled tool
    words it (tools/flows/src/analysis.rs, ``bound_notes``)."""
    notes = []
    unbinned = sum(f.unbinned_packets for f in flows)
    if unbinned:
        hit = sum(1 for f in flows if f.unbinned_packets)
        notes.append(
            f"{unbinned} data packet(s) of {hit} connection(s) lie beyond the throughput bins' "
            f"bound ({max_flow_bins} bins a connection, {max_capture_bins} a capture): "
            "counted, not binned. Their timestamps jump further than a run lasts; check "
            "the node's clock")
    if dropped_packets:
        notes.append(
            f"{dropped_packets} TCP packet(s) of connections past the first "
            f"{max_connections} were not analysed (a capture holds at most "
            f"{max_connections} connections)")
    return notes


class _Unwrap:
    """32-bit sequence numbers to a growing integer, relative to a base."""

    def __init__(self, base: int) -> None:
        self.raw = base
        self.value = 0

    def __call__(self, raw: int) -> int:
        d = (raw - self.raw) % _SEQ_SPACE
        if d >= _HALF:
            d -= _SEQ_SPACE
        self.raw = raw
        self.value += d
        return self.value


class _Stream:
    """In-order reassembly bookkeeping: how far the contiguous stream has reached."""

    def __init__(self) -> None:
        self.next: int | None = None
        self.holes: list[tuple[int, int]] = []  # out-of-order ranges, a heap

    def deliver(self, start: int, end: int) -> int:
        if self.next is None:
            self.next = start
        if end <= self.next:
            return 0
        if start > self.next:
            heapq.heappush(self.holes, (start, end))
            return 0
        old, self.next = self.next, end
        while self.holes and self.holes[0][0] <= self.next:
            self.next = max(self.next, heapq.heappop(self.holes)[1])
        return self.next - old


def _add(bins: list[int], index: int, nbytes: int) -> None:
    if index < 0:  # before bin 0 (a t0 given later than the first data)
        return
    if index >= len(bins):  # the caller checked index < max_bins
        bins.extend([0] * (index + 1 - len(bins)))
    bins[index] += nbytes


def _handshake(conn: Connection, packets: list[Packet]) -> tuple[Packet | None, float | None]:
    syn = synack = None
    for p in packets:
        if syn is None:
            if p.flags & SYN and not p.flags & ACK:
                syn = p
        elif synack is None:
            if p.flags & SYN and p.flags & ACK and (p.src, p.sport) == conn.server:
                synack = p
        elif (p.src, p.sport) == conn.client and p.flags & ACK and not p.flags & SYN:
            if (p.ack - synack.seq) % _SEQ_SPACE == 1:
                return syn, (p.ts_ns - syn.ts_ns) / 1e9
            break
    return syn, None


def analyse_flow(
    conn: Connection,
    packets: list[Packet],
    *,
    bin_s: float = DEFAULT_BIN_S,
    t0_ns: int | None = None,
    max_bins: int = MAX_FLOW_BINS,
) -> FlowStats:
    """Figures of one connection; ``t0_ns`` places bin 0 (default: first data packet).
    Data from bin ``max_bins`` on is counted but not binned (``unbinned_packets``)."""
    if bin_s <= 0:
        raise ValueError("bin_s must be positive")
    if not packets:
        raise ValueError("a flow needs at least one packet")
    from_client = sum(p.payload for p in packets if (p.src, p.sport) == conn.client)
    total = sum(p.payload for p in packets)
    data_src = conn.client if from_client * 2 >= total else conn.server
    syn, rtt = _handshake(conn, packets)
    first_data = next((p for p in packets if p.payload > 0 and (p.src, p.sport) == data_src), None)
    isn = next(
        (p.seq for p in packets if p.flags & SYN and (p.src, p.sport) == data_src),
        None,
    )
    base = isn if isn is not None else (first_data.seq if first_data else packets[0].seq)
    seq_of, ack_of = _Unwrap(base), _Unwrap(base)
    bin_ns = round(bin_s * 1e9)
    t0 = t0_ns if t0_ns is not None else (first_data or packets[0]).ts_ns
    arrival: list[int] = []
    delivered: list[int] = []
    stream = _Stream()
    high: int | None = None
    pending: deque[list[int]] = deque()  # [start, end, ts_ns, valid] of unacked first sends
    samples: list[int] = []
    data_packets = retrans = retrans_bytes = pure_acks = dupacks = payload = unbinned = 0
    last_ack: int | None = None
    last_window = -1
    last_data_ns: int | None = None
    full_ack_ns: int | None = None
    for p in packets:
        if (p.src, p.sport) == data_src:
            if p.payload <= 0:
                continue
            start = seq_of(p.seq)
            end = start + p.payload
            data_packets += 1
            payload += p.payload
            index = (p.ts_ns - t0) // bin_ns
            moved = stream.deliver(start, end)
            if index < max_bins:
                _add(arrival, index, p.payload)
                _add(delivered, index, moved)
            else:
                unbinned += 1
            if high is not None and start < high:
                retrans += 1
                retrans_bytes += p.payload
                for item in pending:  # Karn: no RTT sample from a range sent twice
                    if item[0] >= end:
                        break
                    if item[1] > start:
                        item[3] = 0
            else:
                pending.append([start, end, p.ts_ns, 1])
            high = end if high is None else max(high, end)
            last_data_ns = p.ts_ns
        elif p.flags & ACK:
            ack = ack_of(p.ack)
            if p.payload == 0 and not p.flags & (SYN | FIN | RST):
                pure_acks += 1
                if ack == last_ack and p.window == last_window and high is not None and ack < high:
                    dupacks += 1
            last_ack, last_window = ack, p.window
            acked = []
            while pending and pending[0][1] <= ack:
                acked.append(pending.popleft())
            # An ACK that also covers a repaired hole says when the hole filled, not when
            # the segments behind it arrived: no sample from any of them.
            if all(item[3] for item in acked):
                samples.extend(p.ts_ns - item[2] for item in acked)
            if high is not None and ack >= high:
                full_ack_ns = p.ts_ns
    self_delay = above_min = None
    if samples:
        lowest = min(samples)
        self_delay = _delay_stats(samples, rtt * 1e9 if rtt is not None else lowest)
        above_min = _delay_stats(samples, lowest)
    start_ns = (syn or packets[0]).ts_ns
    fct = None
    syn_fin_retrans = _syn_fin_retrans(conn, packets)
    if last_data_ns is not None:
        done = (
            full_ack_ns if full_ack_ns is not None and full_ack_ns >= last_data_ns else last_data_ns
        )
        fct = (done - start_ns) / 1e9
    return FlowStats(
        connection=conn,
        data_from_client=data_src == conn.client,
        start_ns=packets[0].ts_ns,
        rtt_3whs_s=rtt,
        payload_bytes=payload,
        delivered_bytes=sum(delivered),
        data_packets=data_packets,
        retrans_packets=retrans,
        retrans_bytes=retrans_bytes,
        pure_acks=pure_acks,
        dupacks=dupacks,
        self_delay=self_delay,
        fct_s=fct,
        bin_s=bin_s,
        bins_t0_ns=t0,
        arrival_bins=arrival,
        delivered_bins=delivered,
        unbinned_packets=unbinned,
        syn_fin_retrans=syn_fin_retrans,
        min_rtt_s=min(samples) / 1e9 if samples else None,
        above_min_delay=above_min,
    )


def _delay_stats(samples: list[int], base_ns: float) -> DelayStats:
    """Mean, median and p95 of the samples less ``base_ns``, in seconds (an integer
    base is subtracted exactly, as the compiled tool does)."""
    delays = sorted((s - base_ns) / 1e9 for s in samples)
    return DelayStats(
        mean_s=statistics.fmean(delays),
        median_s=statistics.median(delays),
        p95_s=delays[min(len(delays) - 1, round(0.95 * (len(delays) - 1)))],
        samples=len(delays),
    )


def _syn_fin_retrans(conn: Connection, packets: list[Packet]) -> int:
    """SYN and FIN segments beyond the first of each, per side."""
    seen = {(side, flag): 0 for side in conn for flag in (SYN, FIN)}
    for p in packets:
        side = Endpoint(p.src, p.sport)
        for flag in (SYN, FIN):
            if p.flags & flag and (side, flag) in seen:
                seen[(side, flag)] += 1
    return sum(max(0, n - 1) for n in seen.values())
