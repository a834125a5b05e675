"""cca-compare's retransmission % and duplicate-ACK % come from the capture at the
sender (issue 14, done-means 1): a transfer is modelled packet by packet (the segments
the sender puts on the wire, which of them the path loses, the receiver's cumulative
ACK for every arrival, the sender's fast retransmit on the third duplicate ACK), its
sender-side capture is written as a pcap, and the run's bundle (result, modem samples,
that capture under server/capture/) goes through ingest's conversion. The points must
carry exactly the model's counts, and the radio of each transfer's span."""

from __future__ import annotations

import heapq
import json
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.packets import ACK, FIN, SYN
from orchestrator.services.flowtool import analyse_file, find_tool
from orchestrator.timeseries.lineprotocol import Point
from orchestrator.timeseries.schema import FLOWS, RunContext, bundle_points
from studies.cca_compare.points import CCA_BINS, CCA_COMPARE
from testbed_kit.cca_compare import FORMAT, VERSION
from tests.conftest import experiments, require

SERVER, NODE = bytes([172, 30, 3, 10]), bytes([172, 30, 3, 24])
RESPONDER = 5301
MSS = 1400
ONE_WAY_MS = 20.0
T0 = 1_790_000_000.0  # the session's start, Unix seconds (node clock = capture clock here)


def _record(t_s: float, src: bytes, dst: bytes, sport: int, dport: int, *, seq: int,
            ack: int = 0, payload: int = 0, flags: int = ACK, window: int = 500) -> bytes:
    """One raw-IPv4 pcap record, headers only (as the fleet's 96-byte snaplen keeps)."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq % 2**32, ack % 2**32, 5 << 4, flags,
                      window, 0, 0)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40 + payload, 0, 0, 64, 6, 0, src, dst)
    us = round(t_s * 1e6)
    return struct.pack("<IIII", us // 10**6, us % 10**6, 40, 40 + payload) + ip + tcp


@dataclass
class Model:
    """A downlink transfer seen at the server: ``segments`` segments sent 1 ms apart,
    the first transmission of each segment in ``lost`` dropped by the path."""

    port: int
    start_s: float
    segments: int
    lost: frozenset[int] = frozenset()
    records: list[tuple[float, bytes]] = field(default_factory=list)
    acks: list[int] = field(default_factory=list)  # every pure ACK's number, in order
    retransmitted: int = 0

    def run(self) -> Model:
        t = self.start_s
        isn, peer = 1000, 5000
        out = self.records
        out.append((t, _record(t, NODE, SERVER, self.port, RESPONDER, seq=peer, flags=SYN)))
        t += 2 * ONE_WAY_MS / 1e3
        out.append((t, _record(t, SERVER, NODE, RESPONDER, self.port, seq=isn,
                               ack=peer + 1, flags=SYN | ACK)))
        t += 2 * ONE_WAY_MS / 1e3
        out.append((t, _record(t, NODE, SERVER, self.port, RESPONDER, seq=peer + 1,
                               ack=isn + 1)))
        base = isn + 1
        # events: (time at the server, order, kind, segment); arrivals at the receiver
        # are acknowledged one way later, so an ACK is seen 2 * ONE_WAY after the send
        events: list[tuple[float, int, str, int]] = []
        order = 0
        for k in range(self.segments):
            events.append((t + k * 1e-3, order, "send", k))
            order += 1
        heapq.heapify(events)
        received: set[int] = set()
        sent_once: set[int] = set()
        dup_run, last_ack = 0, base
        end = t
        while events:
            when, _, kind, k = heapq.heappop(events)
            end = when
            if kind == "send":
                again = k in sent_once
                sent_once.add(k)
                self.retransmitted += again
                out.append((when, _record(when, SERVER, NODE, RESPONDER, self.port,
                                          seq=base + k * MSS, ack=peer + 1, payload=MSS)))
                if again or k not in self.lost:
                    heapq.heappush(events, (when + 2 * ONE_WAY_MS / 1e3, order, "ack", k))
                    order += 1
            else:  # the receiver got segment k: its cumulative ACK reaches the server
                received.add(k)
                nxt = next(i for i in range(self.segments + 1) if i not in received)
                ack = base + nxt * MSS
                self.acks.append(ack)
                out.append((when, _record(when, NODE, SERVER, self.port, RESPONDER,
                                          seq=peer + 1, ack=ack)))
                dup_run = dup_run + 1 if ack == last_ack else 0
                last_ack = ack
                if dup_run == 3:  # fast retransmit of the hole
                    heapq.heappush(events, (when + 1e-4, order, "send", nxt))
                    order += 1
        fin = base + self.segments * MSS
        out.append((end + 1e-3, _record(end + 1e-3, SERVER, NODE, RESPONDER, self.port,
                                        seq=fin, ack=peer + 1, flags=FIN | ACK)))
        out.append((end + 0.041, _record(end + 0.041, NODE, SERVER, self.port, RESPONDER,
                                         seq=peer + 1, ack=fin + 1, flags=FIN | ACK)))
        self.end_s = end + 0.05
        return self

    @property
    def dupacks(self) -> int:
        """Pure ACKs repeating the one before while data is outstanding: every ACK that
        did not advance (the model never ACKs past what was sent)."""
        return sum(1 for a, b in zip(self.acks, self.acks[1:], strict=False) if a == b)

    @property
    def retrans_pct(self) -> float:
        return 100.0 * self.retransmitted / (self.segments + self.retransmitted)

    @property
    def dupack_pct(self) -> float:
        return 100.0 * self.dupacks / (len(self.acks) + 1)  # + the handshake's last ACK


def _pcap(models: list[Model]) -> bytes:
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 96, 101)  # LINKTYPE_RAW
    records = sorted((r for m in models for r in m.records), key=lambda r: r[0])
    return header + b"".join(rec for _t, rec in records)


def _session() -> tuple[list[Model], dict[str, bytes]]:
    """A CUBIC bulk transfer losing three segments, a BBR one losing none, a CUBIC
    download losing one; modem samples every second, a handover during the first."""
    models = [Model(41001, T0, 400, frozenset({50, 51, 200})).run(),
              Model(41002, T0 + 5, 400).run(),
              Model(41003, T0 + 10, 120, frozenset({30})).run()]
    transfers = [
        {"index": i, "repetition": 0, "cca": cca, "kind": kind, "local_port": m.port,
         "start_unix_s": m.start_s, "end_unix_s": m.end_s, "bytes_moved": m.segments * MSS,
         "error": None}
        for i, (m, cca, kind) in enumerate(zip(models, ("cubic", "bbr", "cubic"),
                                               ("bulk", "bulk", "download"), strict=True))]
    result = {"format": FORMAT, "version": VERSION, "direction": "downlink",
              "server": "172.30.3.10", "port": RESPONDER, "interface": "op2",
              "start": "2026-09-21T12:53:20+00:00", "bulk_s": 1.0, "download_bytes": 168000,
              "settings": {}, "transfers": transfers}
    # the handover counter moves between the samples at T0 and T0 + 1 (the first
    # transfer lasts about 0.6 s from T0), SINR from 24 dB to 27 dB with the new cell
    modem = [{"time": _iso(T0 - 1 + s), "interface": "op2", "sinr": 24.0 if s < 2 else 27.0,
              "rsrp": -90.0, "band": "B20" if s < 2 else "B3",
              "cell_id": 11 if s < 2 else 12, "handovers": 4 if s < 2 else 5}
             for s in range(16)]
    files = {"results/cca-compare.json": json.dumps(result).encode(),
             "meta/modem.jsonl": "\n".join(json.dumps(r) for r in modem).encode(),
             "server/capture/op2.pcap": _pcap(models)}
    return models, files


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


CTX = RunContext(node="it-01", operator="242-01", interface="op2", experiment="cca-compare",
                 run="r-1")


def _by_port(points: list[Point], models: list[Model]) -> dict[int, dict[str, Any]]:
    rows = [p for p in points if p.measurement == CCA_COMPARE]
    assert len(rows) == len(models)
    return {m.port: {**r.fields, **r.tags} for m, r in zip(models, sorted(
        rows, key=lambda p: int(p.fields["index"] or 0)), strict=True)}


def test_the_model_has_what_it_is_meant_to_test() -> None:
    models, _ = _session()
    assert [m.retransmitted for m in models] == [3, 0, 1]
    assert models[0].dupacks >= 3 * 3 and models[1].dupacks == 0 and models[2].dupacks >= 3


def test_retransmissions_and_duplicate_acks_are_the_models() -> None:
    models, files = _session()
    built = bundle_points(files, CTX, catalogue=experiments())
    got = _by_port(built.points, models)
    for m in models:
        row = got[m.port]
        assert row["status"] == "ok", row
        assert row["retrans_packets"] == m.retransmitted
        assert row["dupacks"] == m.dupacks
        assert row["retrans_pct"] == pytest.approx(m.retrans_pct, abs=1e-9)
        assert row["dupack_pct"] == pytest.approx(m.dupack_pct, abs=1e-9)
        # every byte counted once; RTT above the minimum is zero on this queue-less path
        assert row["bytes"] == m.segments * MSS
        assert row["min_rtt_s"] == pytest.approx(2 * ONE_WAY_MS / 1e3, abs=1e-6)
        assert row["self_delay_p95_s"] == pytest.approx(0.0, abs=1e-6)
    assert got[41001]["cca"] == "cubic" and got[41002]["cca"] == "bbr"
    assert got[41003]["kind"] == "download"
    # the server's capture is the sender's side: joined, never turned into flows points
    assert not [p for p in built.points if p.measurement == FLOWS]
    bins = [p for p in built.points if p.measurement == CCA_BINS and p.fields["index"] == 0]
    assert sum(float(p.fields["bps"] or 0) for p in bins) * 0.1 / 8 == pytest.approx(400 * MSS)


def test_each_transfer_gets_the_radio_of_its_span() -> None:
    models, files = _session()
    got = _by_port(bundle_points(files, CTX, catalogue=experiments()).points, models)
    first, second = got[41001], got[41002]
    assert first["handovers"] == 1 and first["band"] == "B20" and first["cell_id"] == 11
    assert second["handovers"] == 0 and second["sinr_db"] == 27.0 and second["band"] == "B3"
    assert first["sinr_db"] == 24.0  # the one sample inside it, before the handover


def test_a_downlink_session_without_the_servers_capture_is_uncaptured_and_says_so() -> None:
    models, files = _session()
    del files["server/capture/op2.pcap"]
    built = bundle_points(files, CTX, catalogue=experiments())
    assert {r["status"] for r in _by_port(built.points, models).values()} == {"uncaptured"}
    assert any("no server capture" in n for n in built.notes), built.notes


def test_the_compiled_tool_counts_the_same(tmp_path: Path) -> None:
    tool = find_tool()
    require(tool is not None, "needs testbed-flows (cd tools && cargo build --release -p "
                              "flows, or $TESTBED_FLOWS_BIN)")
    assert tool is not None
    models, files = _session()
    path = tmp_path / "op2.pcap"
    path.write_bytes(files.pop("server/capture/op2.pcap"))
    built = bundle_points(files, CTX, captures={
        "server/capture/op2.pcap": lambda: analyse_file(path, tool=tool)}, catalogue=experiments())
    reference = bundle_points({**files, "server/capture/op2.pcap": path.read_bytes()}, CTX,
            catalogue=experiments())
    assert _by_port(built.points, models) == _by_port(reference.points, models)
    for m in models:
        assert _by_port(built.points, models)[m.port]["retrans_packets"] == m.retransmitted
