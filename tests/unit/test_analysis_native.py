"""The compiled per-flow analysis (tools/flows, ``testbed-flows``) gives exactly the
reference's figures: every bin, RTT, count, delay statistic and damage note, on every
recorded capture, on those captures re-framed as other link types and formats, cut
short or damaged, and on synthetic captures covering what the recordings do not
(sequence wrap, Karn, IPv6, several connections). The reference is the pure-Python
path (read_capture + analyse_capture), kept as it was.
"""

from __future__ import annotations

import json
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.analysis.capture import CaptureFlows, flows_from_document, reference_flows
from orchestrator.analysis.flows import MAX_CAPTURE_BINS, MAX_FLOW_BINS, analyse_bounded
from orchestrator.analysis.packets import ACK, FIN, LINKTYPE_LINUX_SLL, LINKTYPE_RAW, SYN
from orchestrator.analysis.pcap import CaptureError, iter_frames, read_capture
from orchestrator.services.flowtool import analyse_file, find_tool
from orchestrator.timeseries.schema import RunContext, bundle_points
from tests.conftest import experiments, require

FIXTURES = Path(__file__).parent / "fixtures"
RECORDED = sorted(p.name for p in FIXTURES.iterdir() if p.suffix in (".pcap", ".pcapng"))


@pytest.fixture(scope="module")
def tool() -> str:
    found = find_tool()
    require(found is not None, "needs testbed-flows (cd tools && cargo build --release -p "
                               "flows, or $TESTBED_FLOWS_BIN)")
    assert found is not None
    return found


def _both(data: bytes, tmp: Path, tool: str, bin_s: float = 0.1
          ) -> tuple[CaptureFlows, CaptureFlows]:
    path = tmp / "capture"
    path.write_bytes(data)
    return reference_flows(data, bin_s=bin_s), analyse_file(path, tool=tool, bin_s=bin_s)


def _assert_same(ref: CaptureFlows, native: CaptureFlows) -> None:
    assert native.frames == ref.frames and native.undecoded == ref.undecoded
    assert [f.connection for f in native.flows] == [f.connection for f in ref.flows]
    for a, b in zip(native.flows, ref.flows, strict=True):
        assert a.arrival_bins == b.arrival_bins and a.delivered_bins == b.delivered_bins
        assert a == b  # every field: RTT, counts, delay stats, FCT, t0 (floats to the bit)
    assert native.notes == ref.notes
    assert (str(native.damage), getattr(native.damage, "offset", None),
            getattr(native.damage, "packets_read", None)) == \
        (str(ref.damage), getattr(ref.damage, "offset", None),
         getattr(ref.damage, "packets_read", None))


def test_the_recordings_are_the_fixtures_the_reference_is_tested_on() -> None:
    assert RECORDED == ["short-flows-downlink.pcap", "tcp-6mbit-any.pcap",
                        "tcp-6mbit-any.pcapng", "tcp-6mbit-rx.pcap", "tcp-6mbit-tx.pcap"]


#: Connections in each recording: iperf3's control and data; a short-flows session's 12.
CONNECTIONS = {"short-flows-downlink.pcap": 12}


@pytest.mark.parametrize("name", RECORDED)
@pytest.mark.parametrize("bin_s", [0.1, 0.05, 1.0])
def test_every_recorded_capture_gives_identical_figures(
        name: str, bin_s: float, tmp_path: Path, tool: str) -> None:
    ref, native = _both((FIXTURES / name).read_bytes(), tmp_path, tool, bin_s)
    assert len(ref.flows) == CONNECTIONS.get(name, 2)  # not a vacuous comparison
    assert ref.flows[0].data_packets > 0
    _assert_same(ref, native)


def _rewrite(data: bytes, *, linktype: int, link: bytes, big_endian_ns: bool) -> bytes:
    """The Ethernet capture with each frame's 14-byte header replaced by ``link``."""
    magic, order = (0xA1B23C4D, ">") if big_endian_ns else (0xA1B2C3D4, "<")
    out = bytearray(struct.pack(order + "IHHiIII", magic, 2, 4, 0, 0, 96, linktype))
    for f in iter_frames(data):
        frame = link + data[f.start + 14 : f.start + f.caplen]
        frac = (f.ts_ns % 10**9) // (1 if big_endian_ns else 1000)
        out += struct.pack(order + "IIII", f.ts_ns // 10**9, frac, len(frame),
                           f.orig_len - 14 + len(link))
        out += frame
    return bytes(out)


@pytest.mark.parametrize(("linktype", "link", "big_endian"), [
    (LINKTYPE_RAW, b"", False),
    (LINKTYPE_RAW, b"", True),
    (LINKTYPE_LINUX_SLL, b"\x00\x00\x00\x01\x00\x06" + bytes(8) + b"\x08\x00", False),
])
def test_other_link_layers_and_byte_orders(linktype: int, link: bytes, big_endian: bool,
                                           tmp_path: Path, tool: str) -> None:
    data = _rewrite((FIXTURES / "tcp-6mbit-tx.pcap").read_bytes(), linktype=linktype,
                    link=link, big_endian_ns=big_endian)
    _assert_same(*_both(data, tmp_path, tool))


def _damaged() -> Iterator[tuple[str, bytes]]:
    rx = (FIXTURES / "tcp-6mbit-rx.pcap").read_bytes()
    ng = (FIXTURES / "tcp-6mbit-any.pcapng").read_bytes()
    yield "pcap cut in a record", rx[:-50]
    yield "pcap cut in a record header", rx[: 24 + 16 * 3 + sum(
        f.caplen for f in list(iter_frames(rx))[:3]) + 7]
    yield "pcap file header cut", rx[:10]
    bad = bytearray(rx)
    tenth = list(iter_frames(rx))[9]
    bad[tenth.start - 8 : tenth.start - 4] = struct.pack("<I", 5_000_000)
    yield "pcap record claiming 5 MB", bytes(bad)
    yield "pcapng cut in a block", ng[:-10]
    bad = bytearray(ng)
    block = list(iter_frames(ng))[99].start - 28
    bad[block + 4 : block + 8] = struct.pack("<I", 13)
    yield "pcapng block length not a multiple of 4", bytes(bad)
    bad = bytearray(ng)
    bad[block + 8 : block + 12] = struct.pack("<I", 7)
    yield "pcapng packet naming a missing interface", bytes(bad)


@pytest.mark.parametrize(("what", "data"), list(_damaged()), ids=[w for w, _ in _damaged()])
def test_damaged_captures_keep_the_same_flows_and_the_same_note(
        what: str, data: bytes, tmp_path: Path, tool: str) -> None:
    ref, native = _both(data, tmp_path, tool)
    assert ref.damage is not None, what
    _assert_same(ref, native)


@pytest.mark.parametrize("data", [b"", b"GIF89a", b"\x0a\x0d"])
def test_not_a_capture_raises_the_same_error(data: bytes, tmp_path: Path, tool: str) -> None:
    path = tmp_path / "capture"
    path.write_bytes(data)
    with pytest.raises(CaptureError) as ref:
        reference_flows(data)
    with pytest.raises(CaptureError) as native:
        analyse_file(path, tool=tool)
    assert str(native.value) == str(ref.value)


def _tcp(t_ms: float, src: bytes, dst: bytes, sport: int, dport: int, *, seq: int,
         ack: int = 0, payload: int = 0, flags: int = ACK, window: int = 100) -> bytes:
    """A raw-IP pcap record (IPv4 or IPv6 by address length), headers only."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq % 2**32, ack % 2**32, 5 << 4, flags,
                      window, 0, 0)
    if len(src) == 4:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40 + payload, 0, 0, 64, 6, 0, src, dst)
    else:
        ip = struct.pack("!IHBB16s16s", 6 << 28, 20 + payload, 6, 64, src, dst)
    frame = ip + tcp
    ts = round(t_ms * 1e6)
    return struct.pack("<IIII", ts // 10**9, ts % 10**9 // 1000, len(frame),
                       len(frame) + payload) + frame


def _synthetic() -> bytes:
    """Two interleaved connections, one over IPv6 with its stream wrapping past 2^32,
    with a lost segment, its retransmission, duplicate ACKs, a reordered segment and
    a FIN; and a connection whose handshake was not captured."""
    a4, b4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    a6, b6 = bytes(15) + b"\x01", bytes(15) + b"\x02"
    isn, peer = 2**32 - 3000, 7
    out = [_tcp(0, a6, b6, 40000, 80, seq=isn, flags=SYN),
           _tcp(0.5, b4, a4, 5201, 50000, seq=900, payload=1000),  # mid-stream flow
           _tcp(10, b6, a6, 80, 40000, seq=peer, ack=isn + 1, flags=SYN | ACK),
           _tcp(20, a6, b6, 40000, 80, seq=isn + 1, ack=peer + 1)]
    t, seq = 30.0, isn + 1
    for i in range(60):
        if i != 17:  # lost downstream
            out.append(_tcp(t, a6, b6, 40000, 80, seq=seq, ack=peer + 1, payload=1000))
        if i % 3 == 2:
            acked = min(seq + 1000, isn + 1 + 17 * 1000) if i >= 17 else seq + 1000
            out.append(_tcp(t + 25, b6, a6, 80, 40000, seq=peer + 1, ack=acked))
            if i > 20 and i < 30:
                out.append(_tcp(t + 26, b6, a6, 80, 40000, seq=peer + 1, ack=acked))
        if i == 30:
            out.append(_tcp(t + 1, a6, b6, 40000, 80, seq=isn + 1 + 17000, ack=peer + 1,
                            payload=1000))
        out.append(_tcp(t + 2, b4, a4, 5201, 50000, seq=1900 + i * 500, payload=500))
        t += 7.5
        seq += 1000
    out.append(_tcp(t + 40, b6, a6, 80, 40000, seq=peer + 1, ack=seq))
    out.append(_tcp(t + 50, a6, b6, 40000, 80, seq=seq, ack=peer + 1, flags=FIN | ACK))
    out.append(_tcp(t + 60, a4, b4, 50000, 5201, seq=1, ack=1900 + 60 * 500))
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 96, LINKTYPE_RAW)
    return header + b"".join(out)


@pytest.mark.parametrize("bin_s", [0.1, 0.01])
def test_synthetic_wrap_loss_reordering_and_ipv6(bin_s: float, tmp_path: Path,
                                                  tool: str) -> None:
    ref, native = _both(_synthetic(), tmp_path, tool, bin_s)
    assert len(ref.flows) == 2
    main = ref.flows[0]
    assert main.retrans_packets >= 1 and main.dupacks >= 1 and main.rtt_3whs_s is not None
    assert main.self_delay is not None and main.fct_s is not None
    assert ref.flows[1].rtt_3whs_s is None
    _assert_same(ref, native)


# --- Bounds: a node's capture (untrusted) must not make either path allocate without
# limit. Every field that sizes an allocation is bounded, identically in both paths.

A4, B4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
YEAR_MS = 365 * 24 * 3600 * 1000
_RAW_PCAP = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 96, LINKTYPE_RAW)


def _transfer(sport: int, times_ms: list[float]) -> list[bytes]:
    """A connection's handshake and a 1000-byte segment at each of ``times_ms``."""
    out = [_tcp(0, A4, B4, sport, 80, seq=0, flags=SYN),
           _tcp(1, B4, A4, 80, sport, seq=50, ack=1, flags=SYN | ACK),
           _tcp(2, A4, B4, sport, 80, seq=1, ack=51)]
    for i, t in enumerate(times_ms):
        out.append(_tcp(t, A4, B4, sport, 80, seq=1 + i * 1000, ack=51, payload=1000))
    return out


def _native(data: bytes, tmp: Path, tool: str, *flags: str) -> CaptureFlows:
    """The tool run with explicit bound flags (or its own defaults without)."""
    path = tmp / "capture"
    path.write_bytes(data)
    proc = subprocess.run([tool, *flags, str(path)], capture_output=True, check=True)
    return flows_from_document(json.loads(proc.stdout))


def test_a_packet_years_later_is_counted_not_binned(tmp_path: Path, tool: str) -> None:
    data = _RAW_PCAP + b"".join(_transfer(40000, [10, 110, 5 * YEAR_MS, 250]))
    ref, native = _both(data, tmp_path, tool)
    _assert_same(ref, native)
    flow = ref.flows[0]
    assert flow.data_packets == 4 and flow.payload_bytes == 4000
    assert flow.unbinned_packets == 1 and flow.arrival_bins == [1000, 1000, 1000]
    assert native.notes == ref.notes == [
        "1 data packet(s) of 1 connection(s) lie beyond the throughput bins' bound (216000 bins "
        "a connection, 2097152 a capture): counted, not binned. Their timestamps jump further "
        "than a run lasts; check the node's clock"]
    # Ingest (either path) writes the rest and says what it skipped.
    ctx = RunContext(node="se-01")
    by_ref = bundle_points({"tx.pcap": data}, ctx, catalogue=experiments())
    by_tool = bundle_points({}, ctx, captures={"tx.pcap": lambda: native}, catalogue=experiments())
    assert f"tx.pcap: {ref.notes[0]}" in by_ref.notes
    assert by_ref.notes == by_tool.notes and by_ref.points == by_tool.points != []


def test_a_capture_shares_one_bin_budget_in_order_of_first_packet(
        tmp_path: Path, tool: str) -> None:
    """Twelve connections each with data in their bin 215,999 (the last a connection
    may have) and 7 h on: the first nine get their 216,000 bins, the tenth only what is
    left of 2^21 (so its bin 215,999 is not binned either), the last two none."""
    last_bin_ms, seven_h = 21_599_950, 7 * 3600 * 1000
    data = _RAW_PCAP + b"".join(
        b"".join(_transfer(40000 + i, [10 + i, 10 + i + last_bin_ms, 20 + i + seven_h]))
        for i in range(12))
    ref, native = _both(data, tmp_path, tool)
    _assert_same(ref, native)
    by_port = sorted(ref.flows, key=lambda f: f.connection.client.port)
    assert [len(f.arrival_bins) for f in by_port] == [MAX_FLOW_BINS] * 9 + [1, 0, 0]
    assert by_port[0].arrival_bins[-1] == 1000 and sum(by_port[0].arrival_bins) == 2000
    assert sum(len(f.arrival_bins) for f in ref.flows) <= MAX_CAPTURE_BINS
    assert [f.unbinned_packets for f in by_port] == [1] * 9 + [2, 3, 3]
    assert native.notes == ref.notes and ref.notes[0].startswith(
        "17 data packet(s) of 12 connection(s) lie beyond")
    # The tool's own defaults are the bounds flows.py defines (and passes as flags).
    assert _native(data, tmp_path, tool).notes == ref.notes


def test_connections_past_the_bound_are_not_analysed(tmp_path: Path, tool: str) -> None:
    data = _RAW_PCAP + b"".join(
        b"".join(_transfer(40000 + i, [10, 110, 460 if i == 0 else 260])) for i in range(5))
    data += _tcp(900, B4, A4, 80, 40004, seq=51, ack=3001)  # an ACK of the 5th: dropped too
    bounds = {"max_flow_bins": 3, "max_capture_bins": 7, "max_connections": 3}
    flows, notes = analyse_bounded(read_capture(data).packets, **bounds)
    native = _native(data, tmp_path, tool, "--max-flow-bins", "3", "--max-capture-bins", "7",
                     "--max-connections", "3")
    assert native.flows == flows and native.notes == notes
    assert sorted(f.connection.client.port for f in flows) == [40000, 40001, 40002]
    # The first's data reaches bin 4, past its 3 (which it uses up); the second's bin 2;
    # the third's grant is the 1 left of 7.
    by_port = sorted(flows, key=lambda f: f.connection.client.port)
    assert [f.arrival_bins for f in by_port] == [[1000, 1000], [1000, 1000, 1000], [1000]]
    assert [f.unbinned_packets for f in by_port] == [1, 0, 2]
    assert notes == [
        "3 data packet(s) of 2 connection(s) lie beyond the throughput bins' bound (3 bins a "
        "connection, 7 a capture): counted, not binned. Their timestamps jump further than "
        "a run lasts; check the node's clock",
        "13 TCP packet(s) of connections past the first 3 were not analysed (a capture holds "
        "at most 3 connections)"]


def _pcapng(blocks: list[tuple[int, bytes]]) -> bytes:
    out = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
    for btype, body in blocks:
        body += bytes(-len(body) % 4)
        out += struct.pack("<II", btype, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))
    return out


def _idb(offset_s: int = 0) -> tuple[int, bytes]:
    opts = struct.pack("<HHq", 14, 8, offset_s) if offset_s else b""
    return 1, struct.pack("<HHI", LINKTYPE_RAW, 0, 0) + opts + struct.pack("<HH", 0, 0)


def _epb(record: bytes, iface: int = 0) -> tuple[int, bytes]:
    """The pcap record ``record`` (from :func:`_tcp`) as an enhanced packet block."""
    sec, usec, caplen, orig_len = struct.unpack_from("<IIII", record)
    ts = sec * 10**6 + usec
    return 6, struct.pack("<IIIII", iface, ts >> 32, ts & 0xFFFFFFFF, caplen,
                          orig_len) + record[16:]


def test_timestamps_offset_past_64_bits_are_clamped_alike(tmp_path: Path, tool: str) -> None:
    """Interface 1's if_tsoffset puts its packets 2^62 s (146 billion years) on: both
    paths clamp them to 2^62 - 1 ns, and the connection's bins stay bounded."""
    records = _transfer(40000, [10, 20, 30, 40])
    blocks = [_idb(), _idb(offset_s=1 << 62)] + [_epb(r, iface=int(i == 5))
                                                 for i, r in enumerate(records)]
    ref, native = _both(_pcapng(blocks), tmp_path, tool)
    _assert_same(ref, native)
    assert ref.flows[0].unbinned_packets == 1 and len(ref.flows[0].arrival_bins) == 1
    assert native.notes == ref.notes != []
    blocks = [_idb(offset_s=-(1 << 62))] + [_epb(r) for r in records]
    ref, native = _both(_pcapng(blocks), tmp_path, tool)
    _assert_same(ref, native)
    assert ref.flows[0].start_ns == -(2**62 - 1) and ref.flows[0].fct_s == 0.0


def test_a_pcapng_packet_block_over_2_mib_is_damage_in_both(tmp_path: Path, tool: str) -> None:
    """The compiled reader holds a block whole, so a block length is bounded like a pcap
    record's (a real file of 3 MiB, so it is not merely truncated)."""
    records = _transfer(40000, [10, 20])
    huge = _epb(records[3] + bytes(3 << 20))
    ref, native = _both(_pcapng([_idb(), *map(_epb, records), huge]), tmp_path, tool)
    assert ref.damage is not None and "is more than any capture holds" in str(ref.damage)
    assert ref.damage.packets_read == 5 and ref.flows[0].data_packets == 2
    _assert_same(ref, native)


def _handshake_and_teardown(sport: int, *, syns: int, fins: int) -> list[bytes]:
    """A 3-segment connection whose SYN is sent ``syns`` times (1 s apart, as a
    retransmission timeout would) and whose client FIN ``fins`` times."""
    base = 5000.0 * (sport % 10)  # connections one after another
    t = base + 1000.0 * (syns - 1)
    out = [_tcp(base + 1000.0 * i, A4, B4, sport, 80, seq=0, flags=SYN) for i in range(syns)]
    out += [_tcp(t + 10, B4, A4, 80, sport, seq=50, ack=1, flags=SYN | ACK),
            _tcp(t + 20, A4, B4, sport, 80, seq=1, ack=51)]
    out += [_tcp(t + 30 + i, B4, A4, 80, sport, seq=51 + 1000 * i, ack=1, payload=1000)
            for i in range(3)]
    out.append(_tcp(t + 50, A4, B4, sport, 80, seq=1, ack=3051))
    out += [_tcp(t + 60 + 200 * i, A4, B4, sport, 80, seq=1, ack=3051, flags=FIN | ACK)
            for i in range(fins)]
    return out


def test_syn_and_fin_retransmissions_are_counted_alike(tmp_path: Path, tool: str) -> None:
    """What the short-flows study excludes a flow for: a SYN or FIN sent again."""
    data = _RAW_PCAP + b"".join([*_handshake_and_teardown(41000, syns=1, fins=1),
                                 *_handshake_and_teardown(41001, syns=2, fins=1),
                                 *_handshake_and_teardown(41002, syns=1, fins=3)])
    ref, native = _both(data, tmp_path, tool)
    by_port = {f.connection.client.port: f for f in ref.flows}
    assert {p: f.syn_fin_retrans for p, f in by_port.items()} == {41000: 0, 41001: 1, 41002: 2}
    # the SYN sent twice holds a 1 s timeout: the completion time shows it
    assert by_port[41001].fct_s is not None and by_port[41001].fct_s > 1.0
    _assert_same(ref, native)
