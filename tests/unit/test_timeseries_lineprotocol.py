"""Line-protocol text and the schema's points, without a server (see
tests/integration/test_influx.py for the round trip through a real influxd)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.flows import analyse_capture
from orchestrator.analysis.pcap import read_capture
from orchestrator.timeseries.lineprotocol import Point, encode, encode_batch
from orchestrator.timeseries.schema import (
    TAGS,
    RunContext,
    bundle_points,
    flow_points,
    point,
    to_ns,
)
from studies.abw_tat.points import ABW, abw_points, abw_step
from studies.tat.points import tat_points
from tests.conftest import experiments

FIXTURES = Path(__file__).parent / "fixtures"


def test_escaping_and_types_per_the_line_protocol_reference() -> None:
    p = Point(
        measurement="my tat,x",
        tags={"z": "b", "operator_name": "Tele 2,=SE", "empty": ""},
        fields={"bps": 1.5, "bytes": 3, "ok": True, "note": 'a "q" \\ z', "gone": None,
                "nan": math.nan},
        time_ns=1_795_312_872_000_000_001,
    )
    assert encode(p) == (
        r"my\ tat\,x,operator_name=Tele\ 2\,\=SE,z=b "
        r'bps=1.5,bytes=3i,ok=true,note="a \"q\" \\ z" 1795312872000000001'
    )
    assert encode_batch([p, p]).count(b"\n") == 2


@pytest.mark.parametrize(
    ("fields", "tags", "match"),
    [
        ({}, {}, "no field"),
        ({"v": math.inf}, {}, "not finite"),
        ({"v": 1.0}, {"node": "a\nb"}, "line break"),
        ({"v": 1.0}, {"node": "trailing\\"}, "backslash"),
    ],
)
def test_what_line_protocol_cannot_carry_is_refused(
    fields: dict[str, float], tags: dict[str, str], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        encode(Point("m", fields, 1, tags))


CTX = RunContext(node="se-01", country="SE", operator="240-01", operator_name="Telia",
                 interface="op0", rat="4G", experiment="tat", campaign="", run="r1")


def test_tat_result_to_points_with_bins_summary_and_policing() -> None:
    bins = [{"t_s": round(i * 0.1, 6), "duration_s": 0.1, "bytes": 125_000,
             "bits_per_second": 10e6} for i in range(50)]
    result = {"format": "testbed.tat", "version": 1, "direction": "uplink",
              "start": "2026-11-22T02:00:00+00:00", "bin_s": 0.1, "bins": bins,
              "mean_bps": 10e6, "bytes": 6_250_000, "sender_bytes": 6_300_000,
              "duration_s": 5.0, "retransmits": None}
    points = tat_points(result, CTX)
    assert len(points) == 51
    t0 = to_ns("2026-11-22T02:00:00+00:00")
    assert [p.time_ns - t0 for p in points[:3]] == [0, 100_000_000, 200_000_000]
    assert points[0].tags == {"node": "se-01", "country": "SE", "operator": "240-01",
                              "operator_name": "Telia", "interface": "op0", "rat": "4G",
                              "experiment": "tat", "run": "r1", "direction": "uplink"}
    summary = points[-1]
    assert summary.measurement == "tat_summary" and summary.fields["policing"] == "flat"
    assert "retransmits=" not in encode(summary)  # None: not known, left out
    with pytest.raises(ValueError, match="testbed.tat v1"):
        tat_points({"format": "other"}, CTX)


def test_abw_and_flow_points_and_unknown_fields() -> None:
    records: list[dict[str, Any]] = [
        {"type": "estimate", "method": "spruce", "estimate_bps": 9e6, "low_bps": None,
                "high_bps": None, "latency_s": 1.2, "bytes_sent": 1000, "control_bytes": 50,
                "packets_sent": 10, "loss": 0.0, "rtt_s": 0.04, "direction": "uplink",
                "start_unix_s": 1_795_312_872.5}, {"type": "error", "error": "x"}]
    [p] = abw_points(records, CTX)
    assert p.measurement == ABW and p.fields["bytes"] == 1050 and p.tags["method"] == "spruce"
    assert p.time_ns == 1_795_312_872_500_000_000
    assert p.fields["step"] is None  # a plain ABw run; a session's step files say theirs
    assert abw_step("results/abw-2-yaz.jsonl") == 2 and abw_step("results/abw.jsonl") is None
    [p] = abw_points(records, CTX, step=abw_step("abw-3-spruce.jsonl"))
    assert p.fields["step"] == 3
    capture = read_capture((FIXTURES / "tcp-6mbit-tx.pcap").read_bytes())
    flows = flow_points(analyse_capture(capture.packets), CTX)
    assert flows[0].tags["direction"] == "uplink" and flows[0].fields["self_delay_s"]
    with pytest.raises(ValueError, match="no field"):
        point(ABW, CTX, {"estimate": 1.0}, 0)
    assert set(TAGS) == set(CTX.tags()) | {"campaign", "session"}
    json.dumps([dict(p.fields) for p in flows])  # plain values only


def test_bundle_points_from_result_files_with_a_damaged_capture_and_no_metadata() -> None:
    pcap = (FIXTURES / "tcp-6mbit-rx.pcap").read_bytes()
    abw = json.dumps({"type": "estimate", "method": "spruce", "estimate_bps": 9e6,
                      "latency_s": 1.0, "start_unix_s": 1_795_312_872.0}) + "\n"
    files = {
        "results/capture.pcap": pcap[:-50],
        "results/abw.jsonl": abw.encode(),
        "results/tat.json": b'{"format": "testbed.tat", "version": 1}',
        "results/iperf3.json": b"{}",
        "logs/stderr.txt": b"...",
    }
    got = bundle_points(files, CTX, catalogue=experiments())
    kinds = sorted({p.measurement for p in got.points})
    assert kinds == ["abw", "flows"]
    assert len(got.notes) == 3
    assert got.notes[0].startswith("meta/modem.jsonl: absent; the run has no modem metadata")
    assert "capture.pcap: capture truncated at byte" in got.notes[1]
    assert "tat.json: not turned into points" in got.notes[2]
