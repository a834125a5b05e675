"""Two orchestrator replicas on PostgreSQL (issue 12): one is killed mid-campaign.

The compose stack runs both replicas behind the front (nginx); the one holding the
loops' lease (the reaper, the planner's periodic pass) is killed with SIGKILL while a
compressed campaign runs on the three nodes. The other takes the lease within its bound
(4/3 of the stack's 6 s lease), the nodes' requests go to it through the front, and
every run ends done with a reason: none lost, none handed out or run twice (each run is
assigned and runs once, and each node's agent ran it once), each bundle archived once.
"""

from __future__ import annotations

import re
import subprocess
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.model.lease import takeover_bound_s
from tests.e2e.audit import audit
from tests.e2e.chaos import container, docker, kill
from tests.e2e.conftest import FINAL, Fleet, story

pytestmark = pytest.mark.e2e

REPLICAS = ("testbed-orchestrator", "testbed-orchestrator-2")
NODES = ("se-01", "se-02", "no-01")
#: TESTBED_HEALTH__LEADER_LEASE_S in docker-compose.yml.
LEASE_S = 6.0


def _holder() -> str | None:
    """The replica holding the loops' lease now (its container name), from PostgreSQL."""
    out = subprocess.run(
        ["docker", "exec", "testbed-postgres", "psql", "-U", "testbed", "-d", "testbed",
         "-tAc", "SELECT holder FROM leases WHERE name = 'loops' AND expires_at > now()"],
        capture_output=True, text=True, check=True).stdout.strip()
    if not out:
        return None
    host = out.split(":")[0]
    for name in REPLICAS:
        if docker("inspect", "-f", "{{.Config.Hostname}}", name).strip() == host:
            return name
    raise AssertionError(f"lease held by {out}, no replica of {REPLICAS}")


def _healthy(name: str, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while docker("inspect", "-f", "{{.State.Health.Status}}", name).strip() != "healthy":
        assert time.monotonic() < end, f"{name} not healthy after {timeout_s}s"
        time.sleep(0.5)


def test_killing_the_leading_replica_mid_campaign_loses_and_repeats_no_run(
        fleet: Fleet) -> None:
    for node in NODES:
        fleet.wait_online(node)
    leader = None
    until = time.monotonic() + 30
    while (leader := _holder()) is None:
        assert time.monotonic() < until, "no replica took the loops' lease"
        time.sleep(0.5)
    survivor = next(n for n in REPLICAS if n != leader)

    # Three sessions, each a 5 s TAT run on every node's op0, a compressed hour (40 s)
    # apart: the first runs before the kill, the others after it. (At 20 s apart a
    # session overlaps the slot its predecessor booked, TAT, padding and grace, and
    # the planner rightly defers it.)
    anchor = datetime.now(UTC).replace(microsecond=0)
    start = anchor + timedelta(hours=1)  # 40 s of wall time from now
    r = fleet.http.post("/api/v1/campaigns", json={
        "version": 2, "name": "replicas", "nodes": list(NODES), "select": "interface:op0",
        "steps": [{"experiment": "tat", "parameters": {"duration_s": 5}}],
        "recurrence": {"kind": "every", "hours": 1, "start": start.isoformat(),
                       "end": (start + timedelta(hours=3)).isoformat()},
        "time_scale": 90, "time_anchor": anchor.isoformat()})
    assert r.status_code == 201, r.text
    runs: list[dict[str, Any]] = r.json()["runs"]
    assert len(runs) == 3 * len(NODES), r.json()["decisions"]
    ids = [run["id"] for run in runs]

    # Mid-campaign: once a run of the first session runs, the leader dies.
    until = time.monotonic() + 90
    while not any(fleet.get(f"/api/v1/runs/{i}")["state"] in ("running", "uploading", "done")
                  for i in ids):
        assert time.monotonic() < until, "no run started"
        time.sleep(0.5)
    killed_at = time.monotonic()
    kill(leader)
    while _holder() != survivor:
        assert time.monotonic() - killed_at < takeover_bound_s(LEASE_S) + 2, \
            f"{survivor} did not take the lease within {takeover_bound_s(LEASE_S)} s"
        time.sleep(0.25)
    took_s = time.monotonic() - killed_at

    ended = [fleet.wait(i, FINAL, timeout_s=150) for i in ids]
    for run in ended:
        assert run["state"] == "done" and run["reason"], story(run)
        states = [e["state"] for e in run["events"]]
        assert states.count("assigned") == 1 and states.count("running") == 1, story(run)
    # Each node's agent ran each of its runs once.
    for node in NODES:
        logs = subprocess.run(["docker", "logs", container(node)], capture_output=True,
                              text=True, check=True)
        text = logs.stdout + logs.stderr
        for run in (x for x in ended if x["node"] == node):
            # node_agent.execution logs each execution's outcome once: "uploading
            # (experiment finished; ...)" for a run that ran to its end.
            ran = re.findall(rf"run {run['id']}: (uploading|failed) \(", text)
            assert len(ran) == 1, (run["id"], ran)

    # The killed replica back (the audit reads the archive through testbed-orchestrator):
    # it follows, and the bundles are each archived once.
    docker("start", leader)
    _healthy(leader, 60)
    found = audit(fleet, ids)
    assert not found.problems(), found.explain()
    print(f"lease taken over {took_s:.1f} s after the kill "
          f"(bound {takeover_bound_s(LEASE_S):.0f} s)")
