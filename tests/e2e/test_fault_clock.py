"""Fault matrix row 6: a node whose clock is 5 min fast, then 5 min slow.

The skew is real for the node's processes: the agent is started again with
tools/skewclock preloaded (``faults/clock-skew``, node_agent/skew.py) and hands the same
clock to its experiment containers, so heartbeats, state reports, the run's
meta/run.json, the modem samples and iperf3's own start time are all 5 min off. What a user checks:

- the run starts when it was booked, in orchestrator time (its ``running`` transition,
  stamped by the orchestrator, is within a few seconds of ``not_before``);
- the bundle records the offset the node used (~ +-300 s, with its uncertainty);
- the run's points in InfluxDB lie within the run's true (orchestrator) time window;
- ``testbed node list`` shows the node's offset;
- the fault matrix's five figures (audit) show no problem.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.e2e.audit import audit, record
from tests.e2e.chaos import container, docker, sh
from tests.e2e.conftest import Fleet, story

NODE = "se-02"
SKEW_S = 300
FAULT = "/var/lib/testbed-agent/faults/clock-skew"
#: How far ahead of submission the run is booked: time for the assignment to reach the
#: node (2 s heartbeats, prefetched 3 ahead) and be held until its slot.
LEAD_S = 15
#: How close to ``not_before`` the run must start (deploying, container start, report).
START_TOLERANCE_S = 5
#: Measurements whose points come from node-stamped files (results, the node's
#: capture, meta samples).
NODE_STAMPED = ("tat", "tat_summary", "modem", "flows")
#: Slack around the run's window: a run's modem samples begin with the last one taken
#: before it (every 5 s), and iperf3 stamps its start in whole seconds. 5 min is far out.
SLACK_S = 6


def _restart_with_skew(fleet: Fleet, skew_s: int | None) -> None:
    """Arm (or clear) the fault, restart the node, and wait until its agent reports the
    offset it now runs with."""
    name = container(NODE)
    sh(name, f"mkdir -p $(dirname {FAULT}) && echo {skew_s} > {FAULT}" if skew_s is not None
       else f"rm -f {FAULT}")
    docker("restart", "-t", "20", name)
    fleet.wait_online(NODE, timeout_s=90)
    want = float(skew_s or 0)
    end = time.monotonic() + 60
    while True:
        offset = fleet.get(f"/api/v1/nodes/{NODE}")["clock_offset_s"]
        if offset is not None and abs(offset - want) < 2:
            return
        assert time.monotonic() < end, f"{NODE} reports a clock offset of {offset} s, " \
                                       f"not {want}"
        time.sleep(1)


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _submit_at(fleet: Fleet, not_before: datetime) -> str:
    r = fleet.http.post("/api/v1/runs", json={
        "experiment": "tat", "node": NODE, "interface": "op0",
        "parameters": {"duration_s": 5}, "not_before": not_before.isoformat()})
    assert r.status_code == 201, r.text
    run_id: str = r.json()["id"]
    return run_id


def _run_meta(fleet: Fleet, run_id: str) -> dict[str, Any]:
    r = fleet.http.get(f"/api/v1/runs/{run_id}/bundle")
    assert r.status_code == 200, r.text
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        member = tar.extractfile("meta/run.json")
        assert member is not None
        doc: dict[str, Any] = json.loads(member.read())
    return doc


def _points(fleet: Fleet, measurement: str, run_id: str) -> list[datetime]:
    end = time.monotonic() + 60  # ingest runs every 2 s after the bundle is archived
    while True:
        rows = fleet.influx(f"SELECT * FROM {measurement} WHERE run = '{run_id}'")
        if rows or time.monotonic() > end:
            return [_at(row[0]) for row in rows]
        time.sleep(1)


def _check_run(fleet: Fleet, run_id: str, not_before: datetime, skew_s: int) -> None:
    run = fleet.wait(run_id, {"done", "failed", "cancelled", "expired"}, timeout_s=120)
    assert run["state"] == "done", story(run)
    events = {e["state"]: _at(e["at"]) for e in run["events"]}
    started = events["running"]
    late = (started - not_before).total_seconds()
    assert -1 <= late <= START_TOLERANCE_S, (
        f"node {skew_s:+d} s off started {late:+.1f} s from not_before\n{story(run)}")
    clock = _run_meta(fleet, run_id)["clock"]
    assert abs(clock["offset_s"] - skew_s) < 2, clock
    assert 0 <= clock["uncertainty_s"] < 1, clock
    assert abs((_at(clock["measured_at"]) - started).total_seconds()) < 120, clock
    # The run's true window: from its slot to the orchestrator's word that it was done.
    window = (not_before - timedelta(seconds=SLACK_S),
              events["done"] + timedelta(seconds=SLACK_S))
    for measurement in NODE_STAMPED:
        times = _points(fleet, measurement, run_id)
        assert times, f"no {measurement} points for run {run_id}"
        outside = [t for t in times if not window[0] <= t <= window[1]]
        assert not outside, (f"{measurement} points of {run_id} outside {window}: "
                             f"{outside[:3]} (node {skew_s:+d} s off)")


def test_fast_and_slow_node_clocks_start_on_time_and_land_in_place(fleet: Fleet) -> None:
    began = time.monotonic()
    runs: list[str] = []
    try:
        for skew in (SKEW_S, -SKEW_S):
            _restart_with_skew(fleet, skew)
            listed = fleet.cli("node", "list")
            row = next(line for line in listed.splitlines() if line.startswith(NODE))
            assert any(abs(float(cell) - skew) < 2 for cell in row.split()
                       if cell[0] in "+-" and cell[1:].replace(".", "").isdigit()), listed
            not_before = (datetime.now(UTC) + timedelta(seconds=LEAD_S)).replace(microsecond=0)
            run_id = _submit_at(fleet, not_before)
            runs.append(run_id)
            _check_run(fleet, run_id, not_before, skew)
    finally:
        _restart_with_skew(fleet, None)
    result = audit(fleet, runs)
    assert not result.problems(), result.problems()
    record(6, "node clock 5 min fast, and another 5 min slow", result,
           skew_s=[SKEW_S, -SKEW_S], wall_s=round(time.monotonic() - began),
           fault=(f"node wall clock {SKEW_S} s fast, then {SKEW_S} s slow (a preloaded "
                  "skewed clock); each run started within 5 s of its slot in orchestrator "
                  "time, its points inside its true window"))
