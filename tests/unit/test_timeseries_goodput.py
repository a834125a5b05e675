"""goodput-sequence results into points (orchestrator.timeseries.schema), on recorded
results: one ``goodput`` point per transfer and a ``goodput_summary`` per run whose
figures are the kit's, recomputed; a damaged result is a note, never an exception."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.timeseries.schema import RunContext, bundle_points, to_ns
from studies.goodput_sequence.points import GOODPUT, GOODPUT_SUMMARY, goodput_points
from testbed_kit.goodput import summarise, transfer_goodputs
from tests.conftest import experiments

FIXTURES = Path(__file__).parent / "fixtures" / "goodput"
CTX = RunContext(node="it-01", country="IT", operator="222-01", operator_name="TIM",
                 interface="op0", rat="3G", experiment="goodput-sequence", run="r1")


def recorded(name: str = "loopback-downlink-4096x11.json") -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return doc


def test_one_point_per_transfer_and_a_summary() -> None:
    doc = recorded()
    points = goodput_points(doc, CTX)
    transfers = [p for p in points if p.measurement == GOODPUT]
    [summary] = [p for p in points if p.measurement == GOODPUT_SUMMARY]
    assert [p.fields["index"] for p in transfers] == list(range(1, 12))
    first = doc["transfers"][0]
    assert transfers[0].time_ns == to_ns(first["start"]) == summary.time_ns
    assert transfers[0].fields["goodput_bps"] == pytest.approx(first["goodput_bps"])
    assert transfers[0].tags.items() >= {"node": "it-01", "rat": "3G", "size": "4096",
                                         "direction": "downlink"}.items()
    assert summary.tags["size"] == "4096"
    assert summary.fields["transfers"] == 11 and summary.fields["size_bytes"] == 4096
    expected = summarise(transfer_goodputs(doc), 4096).as_dict()
    assert {k: summary.fields[k] for k in expected} == pytest.approx(expected)
    assert summary.fields["g1_excess_s"] is not None


def test_the_summary_is_recomputed_not_copied() -> None:
    doc = recorded("loopback-uplink-1000000x7.json")
    doc["summary"] = {"g1_bps": 1.0, "g1_below_ci": False}  # a wrong file summary
    [summary] = [p for p in goodput_points(doc, CTX) if p.measurement == GOODPUT_SUMMARY]
    assert summary.fields["g1_bps"] != 1.0
    assert summary.tags["direction"] == "uplink"


def test_bundle_routes_goodput_results_and_notes_damage() -> None:
    good = json.dumps(recorded()).encode()
    short = recorded()
    short["transfers"] = short["transfers"][:3]
    built = bundle_points({"results/goodput.json": good,
                           "results/other/goodput.json": json.dumps(short).encode()}, CTX,
                                   catalogue=experiments())
    assert sum(p.measurement == GOODPUT for p in built.points) == 11
    assert sum(p.measurement == GOODPUT_SUMMARY for p in built.points) == 1
    assert any(n.startswith("results/other/goodput.json: not turned into points: 3 transfers")
               for n in built.notes), built.notes
