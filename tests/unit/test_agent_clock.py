"""The node's clock offset: the estimate, orchestrator time on a skewed node, the slot
in node time, the estimate kept across a restart and recorded in meta/run.json."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from node_agent.assignments import AssignmentBook
from node_agent.clock import (
    ClockEstimate,
    estimate,
    load_estimate,
    node_time,
    on_node_clock,
    orchestrator_time,
    save_estimate,
)
from node_agent.config import parse_config
from node_agent.rundir import RunOutcome, write_run_meta
from node_agent.spec import build_spec
from testbed_common.states import RunState
from testbed_common.wire import Assignment

T0 = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
FAST = ClockEstimate(offset_s=300.0, uncertainty_s=0.01, measured_at=T0)
SLOW = ClockEstimate(offset_s=-300.0, uncertainty_s=0.01, measured_at=T0)
CONFIG = parse_config(
    {
        "node_id": "se-01", "orchestrator_url": "http://o:8080",
        "netns_container": "testbed-node-se-01",
        "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
                        "server_address": "172.30.1.10"}],
    },
    {"TESTBED_NODE_TOKEN": "t"},
)


def _a(start: datetime) -> Assignment:
    return Assignment(run_id="r-1", experiment="tat", image="testbed/exp-tat:1",
                      parameters={}, interface="op0", not_before=start,
                      deadline=start + timedelta(minutes=2), max_bytes=10_000_000)


def test_estimate_is_the_midpoint_with_half_the_round_trip_as_uncertainty() -> None:
    # Node 300 s fast, 0.4 s round trip, the orchestrator stamps the middle.
    sent = T0 + timedelta(seconds=300)
    e = estimate(sent_at=sent, received_at=sent + timedelta(seconds=0.4),
                 server_time=T0 + timedelta(seconds=0.2))
    assert e.offset_s == 300.0
    assert e.uncertainty_s == 0.2
    assert e.measured_at == T0 + timedelta(seconds=0.2)


def test_a_fast_or_slow_node_starts_its_run_at_the_booked_orchestrator_time() -> None:
    a = _a(T0)
    for clock in (FAST, SLOW):
        book = AssignmentBook([a])
        skew = timedelta(seconds=clock.offset_s)
        # One second before the slot in orchestrator time: not due, whatever the node reads.
        early = orchestrator_time(T0 - timedelta(seconds=1) + skew, clock)
        assert book.next_due(early) is None
        assert book.seconds_until_next(early) == 1.0
        assert book.next_due(orchestrator_time(T0 + skew, clock)) == a
    # Uncorrected, the fast node would start 5 min early and the slow one 5 min late.
    assert AssignmentBook([a]).next_due(T0 + timedelta(seconds=300)) == a
    assert AssignmentBook([a]).next_due(T0 - timedelta(seconds=299)) is None


def test_no_estimate_yet_means_the_node_clock() -> None:
    assert orchestrator_time(T0, None) == T0
    assert node_time(T0, None) == T0
    assert on_node_clock(_a(T0), None) == _a(T0)


def test_slot_handed_to_the_run_is_in_node_time() -> None:
    fast = on_node_clock(_a(T0), FAST)
    assert fast.not_before == T0 + timedelta(minutes=5)
    assert fast.deadline == T0 + timedelta(minutes=7)
    slow = on_node_clock(_a(T0), SLOW)
    assert slow.deadline == T0 - timedelta(minutes=3)
    # The experiment's config.json carries the deadline its own (node) clock reads.
    spec = build_spec(fast, CONFIG, interface_address=None, clock=FAST)
    assert spec.config_json()["deadline"] == (T0 + timedelta(minutes=7)).isoformat()


def test_estimate_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state" / "clock.json"
    assert load_estimate(path) is None
    save_estimate(SLOW, path)
    assert load_estimate(path) == SLOW


def test_a_damaged_estimate_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "clock.json"
    for text in ("{", '{"offset_s": 1}', '{"offset_s": 1, "uncertainty_s": 0, '
                 '"measured_at": "2026-11-22T02:00:00"}'):
        path.write_text(text)
        assert load_estimate(path) is None


def test_run_meta_records_the_offset_used(tmp_path: Path) -> None:
    spec = build_spec(on_node_clock(_a(T0), FAST), CONFIG, interface_address=None,
                      clock=FAST)
    write_run_meta(spec, tmp_path, RunOutcome(RunState.UPLOADING, "ok"))
    doc = json.loads((tmp_path / "meta" / "run.json").read_text())
    assert doc["clock"] == {"offset_s": 300.0, "uncertainty_s": 0.01,
                            "measured_at": T0.isoformat()}
    unknown = build_spec(_a(T0), CONFIG, interface_address=None)
    write_run_meta(unknown, tmp_path, RunOutcome(RunState.UPLOADING, "ok"))
    assert json.loads((tmp_path / "meta" / "run.json").read_text())["clock"] is None
