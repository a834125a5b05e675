"""TCP flow figures on real captures, checked against iperf3 and tshark on the same transfer.

``tcp-6mbit-iperf3.json`` is the client report of the transfer in the captures (see
test_analysis_pcap), with the server's own 100 ms receiver bins (``-J -i 0.1``).
Retransmission and duplicate-ACK counts were read with tshark 4.0.17 from the same
files (``tcp.stream==1 && tcp.analysis.retransmission || ...fast_retransmission``,
``tcp.analysis.duplicate_ack``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.flows import (
    Connection,
    Endpoint,
    FlowStats,
    analyse_capture,
    analyse_flow,
    tcp_connections,
)
from orchestrator.analysis.packets import ACK, SYN, TCP, Packet
from orchestrator.analysis.pcap import read_capture

FIXTURES = Path(__file__).parent / "fixtures"
RATE_BPS = 6e6  # the tbf bottleneck of the recording


def _main_flow(name: str) -> tuple[FlowStats, list[Packet]]:
    packets = read_capture((FIXTURES / name).read_bytes()).packets
    flow = analyse_capture(packets)[0]
    return flow, tcp_connections(packets)[flow.connection]


def _iperf3_receiver_bins() -> list[dict[str, Any]]:
    raw = json.loads((FIXTURES / "tcp-6mbit-iperf3.json").read_text())
    return [i["sum"] for i in raw["server_output_json"]["intervals"]]


def _errors(bins: list[int], ref: list[dict[str, Any]]) -> list[float]:
    # iperf3's tail interval (3.000-3.01 s) is no 100 ms bin: compare full ones only
    return [abs(b - r["bytes"]) / r["bytes"] for b, r in zip(bins, ref, strict=False)
            if r["end"] - r["start"] > 0.09]


def test_pcap_bins_match_iperf3_receiver_bins() -> None:
    """Bin 0 starts at the first data segment; the iperf3 server starts its interval
    clock when the test starts, within a few ms of that. The alignment is found by
    least squares over +-50 ms (2 ms steps) and must come out small; then the
    in-order delivered bytes (what the server could read) agree bin by bin."""
    flow, packets = _main_flow("tcp-6mbit-rx.pcap")
    ref = _iperf3_receiver_bins()
    candidates = []
    for offset_ms in range(-50, 51, 2):
        f = analyse_flow(flow.connection, packets, t0_ns=flow.bins_t0_ns + offset_ms * 10**6)
        errs = _errors(f.delivered_bins, ref)
        candidates.append((sum(e * e for e in errs), offset_ms, f, errs))
    _, offset_ms, aligned, errs = min(candidates, key=lambda c: c[0])
    assert abs(offset_ms) <= 20
    assert sum(errs) / len(errs) < 0.05  # whole transfer, mean per-bin error
    steady = errs[10:]  # after slow start's overshoot and its loss recovery (1 s)
    assert len(steady) >= 19 and max(steady) < 0.05
    # arrival bins (retransmissions included) agree too once the losses are repaired
    assert max(_errors(aligned.arrival_bins, ref)[10:]) < 0.05
    # and the mean rate is the bottleneck's, less the 52 header bytes per 1500
    mean_bps = sum(aligned.delivered_bins[10:29]) * 8 / (19 * 0.1)
    assert mean_bps == pytest.approx(RATE_BPS * 1448 / 1514, rel=0.05)


def test_retransmissions_and_dupacks_as_tshark_counts_them() -> None:
    rx, _ = _main_flow("tcp-6mbit-rx.pcap")
    tx, _ = _main_flow("tcp-6mbit-tx.pcap")
    assert (rx.retrans_packets, rx.dupacks) == (38, 28)
    assert (tx.retrans_packets, tx.dupacks) == (118, 28)
    assert rx.retrans_pct == pytest.approx(100 * 38 / 981)
    assert rx.dupack_pct == pytest.approx(100 * 28 / rx.pure_acks)
    assert 0 < tx.retrans_bytes_pct < 20


def test_handshake_self_inflicted_delay_and_completion() -> None:
    rx, _ = _main_flow("tcp-6mbit-rx.pcap")
    tx, _ = _main_flow("tcp-6mbit-tx.pcap")
    assert str(tx.connection.server).endswith(":5201") and tx.data_from_client
    for f in (rx, tx):
        assert f.rtt_3whs_s is not None and 0 < f.rtt_3whs_s < 0.005  # veths: microseconds
        assert f.fct_s == pytest.approx(3.0, abs=0.1)  # iperf3 -t 3
    # The sender-side capture sees the bottleneck queue the flow builds itself (tbf
    # latency 50 ms); the receiver-side one only the receiver's ACK turnaround.
    assert tx.self_delay is not None and rx.self_delay is not None
    assert 0.01 < tx.self_delay.median_s <= 0.06
    assert rx.self_delay.median_s < 0.001
    assert tx.delivered_bytes == pytest.approx(rx.delivered_bytes, rel=0.01)


def _pkt(t_ms: int, *, c2s: bool, seq: int, ack: int = 0, payload: int = 0,
         flags: int = ACK) -> Packet:
    a, b = (b"\x0a\x00\x00\x01", 40000), (b"\x0a\x00\x00\x02", 80)
    (src, sport), (dst, dport) = (a, b) if c2s else (b, a)
    return Packet(t_ms * 10**6, src, dst, TCP, sport, dport, 52 + payload, payload,
                  seq % 2**32, ack % 2**32, flags, 100)


def test_sequence_wrap_loss_repair_and_karn() -> None:
    isn = 2**32 - 1000  # the stream wraps past 2^32 after 1000 bytes
    pkts = [
        _pkt(0, c2s=True, seq=isn, flags=SYN),
        _pkt(10, c2s=False, seq=5, ack=isn + 1, flags=SYN | ACK),
        _pkt(20, c2s=True, seq=isn + 1, ack=6),
        _pkt(30, c2s=True, seq=isn + 1, ack=6, payload=1000),
        _pkt(40, c2s=True, seq=isn + 1001, ack=6, payload=1000),  # lost downstream
        _pkt(150, c2s=True, seq=isn + 2001, ack=6, payload=1000),  # bins from t0 = 30 ms
        _pkt(160, c2s=False, seq=6, ack=isn + 1001),
        _pkt(165, c2s=False, seq=6, ack=isn + 1001),  # duplicate ACK
        _pkt(240, c2s=True, seq=isn + 1001, ack=6, payload=1000),  # retransmission
        _pkt(260, c2s=False, seq=6, ack=isn + 3001),
    ]
    conn = Connection(Endpoint(pkts[0].src, 40000), Endpoint(pkts[0].dst, 80))
    assert list(tcp_connections(pkts)) == [conn]
    f = analyse_flow(conn, pkts)
    assert f.rtt_3whs_s == pytest.approx(0.020)
    assert (f.data_packets, f.retrans_packets, f.dupacks, f.pure_acks) == (4, 1, 1, 3)
    assert f.arrival_bins == [2000, 1000, 1000]
    # seen from the sender: each byte counted once, when it was first in order
    assert f.delivered_bins == [2000, 1000, 0] and f.delivered_bytes == 3000
    # Karn: only the first segment (acked at 160 ms, sent at 30) gives a sample
    assert f.self_delay is not None and f.self_delay.samples == 1
    assert f.self_delay.mean_s == pytest.approx(0.130 - 0.020)
    assert f.fct_s == pytest.approx(0.260)
