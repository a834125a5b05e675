"""A short-flows result joined with its capture, as ingest writes it (pure): on the
recorded session (see test_short_flows_result), and on flows that must be excluded,
failed or not found in the capture."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from orchestrator.analysis.capture import reference_flows
from orchestrator.timeseries.schema import RunContext, bundle_points
from studies.short_flows.points import SHORT_FLOWS, flow_rows
from testbed_kit.short_flows import parse_result, short_sizes
from tests.conftest import experiments

FIXTURES = Path(__file__).parent / "fixtures"
CTX = RunContext(node="no-01", operator="242-01", operator_name="Telenor",
                 experiment="short-flows", run="r-1")


def _recorded() -> tuple[dict[str, Any], bytes]:
    return (json.loads((FIXTURES / "short-flows-downlink.json").read_text()),
            (FIXTURES / "short-flows-downlink.pcap").read_bytes())


def test_every_recorded_flow_gets_its_figures_from_the_capture() -> None:
    doc, pcap = _recorded()
    result = parse_result(doc)
    rows = flow_rows(result, reference_flows(pcap).flows)
    assert [r.fields["status"] for r in rows] == ["ok"] * 12
    assert [r.fields["size_bytes"] for r in rows] == [*short_sizes(), result.long_bytes]
    fcts = [float(r.fields["fct_s"] or 0) for r in rows]
    # bigger flows take longer (the capture's times, not the client's timer)
    assert fcts[-1] > fcts[5] > fcts[0] > 0
    for r in rows:
        assert float(r.fields["fct_s"] or 0) > float(r.fields["rtt_3whs_s"] or 0) > 0
        assert r.fields["syn_fin_retrans"] == 0
    # stamped at each connection's first packet: in order, a gap apart
    times = [r.time_ns for r in rows]
    assert times == sorted(times)


def test_retransmitted_syn_or_fin_excludes_a_flow_and_a_failed_one_is_kept() -> None:
    doc, pcap = _recorded()
    result = parse_result(doc)
    flows = reference_flows(pcap).flows
    port_of = {f.connection.client.port: f for f in flows}
    second, third = result.flows[1].local_port, result.flows[2].local_port
    flows = [replace(f, syn_fin_retrans=1) if f.connection.client.port == second else f
             for f in flows if f.connection.client.port != third]
    doc["flows"][4]["error"] = "timed out"
    rows = flow_rows(parse_result(doc), flows)
    status = [r.fields["status"] for r in rows]
    assert status[1:5] == ["excluded", "uncaptured", "ok", "failed"]
    assert rows[1].fields["fct_s"] == port_of[second].fct_s  # written, never averaged
    assert rows[4].fields.get("fct_s") is None and rows[2].fields.get("fct_s") is None


def test_ingest_writes_one_short_flows_point_per_flow() -> None:
    doc, pcap = _recorded()
    built = bundle_points({"results/short-flows.json": json.dumps(doc).encode(),
                           "results/capture/op0.pcap": pcap}, CTX, catalogue=experiments())
    points = [p for p in built.points if p.measurement == SHORT_FLOWS]
    assert len(points) == 12
    assert {p.tags["direction"] for p in points} == {"downlink"}
    assert [p.tags["kind"] for p in points] == ["short"] * 11 + ["long"]
    assert [p.tags["size"] for p in points][:11] == [str(s) for s in short_sizes()]
    assert all(p.tags["operator_name"] == "Telenor" for p in points)
    # the capture's own per-connection points are written as for every run
    assert sum(p.measurement == "flows" for p in built.points) >= 12


def test_a_result_without_its_capture_is_written_as_uncaptured() -> None:
    doc, _ = _recorded()
    built = bundle_points({"results/short-flows.json": json.dumps(doc).encode()}, CTX,
            catalogue=experiments())
    points = [p for p in built.points if p.measurement == SHORT_FLOWS]
    assert {p.fields["status"] for p in points} == {"uncaptured"}


def test_a_damaged_result_gives_a_note_not_points() -> None:
    doc, pcap = _recorded()
    doc["direction"] = "sideways"
    built = bundle_points({"results/short-flows.json": json.dumps(doc).encode(),
                           "results/capture/op0.pcap": pcap}, CTX, catalogue=experiments())
    assert not [p for p in built.points if p.measurement == SHORT_FLOWS]
    assert any("results/short-flows.json: not turned into points: direction" in n
               for n in built.notes)
