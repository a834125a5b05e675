"""The fault matrix's spool rows (issue 10) on the compose fleet's real agents.

Row 5, node disk full: a run whose captures and bundle would not fit is refused with
the reason, the bundles already spooled are not deleted and do upload, and once space
is freed the next run runs and ends done.

Row 9, node restarted with 3 bundles in its spool: they upload once each after the
restart, and their runs end done.

In both rows the spool fills because the node's bundle chunks are refused on the way
out (:func:`~tests.e2e.chaos.uploads_dropped`) while its heartbeats and state reports go
through: the orchestrator hands runs out only a few heartbeats ahead, so a fully cut
link could not leave three runs on the node.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.e2e.audit import audit, record
from tests.e2e.chaos import (
    container,
    docker,
    partitioned,
    sh,
    small_state_disk,
    uploads_dropped,
)
from tests.e2e.conftest import FINAL, Fleet, story

pytestmark = pytest.mark.e2e

MB = 10**6
#: A short TCP-throughput run (a 17 s slot).
SHORT = {"duration_s": 2}


def until(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < end, f"not {what} after {timeout_s:.0f} s"
        time.sleep(1)


def spooled(name: str, state: str) -> list[str]:
    """Run ids of the complete bundles in the node's spool (each has its .json)."""
    out = sh(name, f"ls {state}/spool 2>/dev/null || true")  # made when the agent starts
    return sorted(f.removesuffix(".json") for f in out.split() if f.endswith(".json"))


def bundle_sums(name: str, state: str) -> str:
    return sh(name, f"cd {state}/spool && sha256sum *.tar.gz")


def ingested(fleet: Fleet, run_ids: list[str]) -> Callable[[], bool]:
    """Whether every run's series is in InfluxDB (ingest runs every few seconds after a
    bundle is archived, so a run is done a little before its series exist)."""
    return lambda: all(fleet.influx(f"SHOW SERIES WHERE \"run\" = '{r}'") for r in run_ids)


def agent_running(name: str) -> bool:
    """The container runs its agent (PID 1, once the link emulation is set up)."""
    args = docker("exec", name, "ps", "-o", "args=", "-p", "1", check=False)
    return "testbed-agent" in args


def states(fleet: Fleet, run_ids: list[str]) -> list[str]:
    return [fleet.get(f"/api/v1/runs/{r}")["state"] for r in run_ids]


def test_row5_a_full_disk_refuses_the_run_and_keeps_the_spool(fleet: Fleet) -> None:
    started = time.monotonic()
    node, name = "se-02", container("se-02")
    floor = 8 * MB
    with small_state_disk(node, 64 * 2**20, {"min_free_disk_bytes": floor}) as state:
        fleet.wait_online(node, timeout_s=120)
        with uploads_dropped(name):
            earlier = [fleet.submit(node, "op0", **SHORT) for _ in range(2)]
            until("both earlier bundles spooled", lambda: spooled(name, state) == sorted(
                earlier), timeout_s=120)
            sums = bundle_sums(name, state)
            # another program fills the disk: 3 MB left, under the 8 MB floor
            sh(name, f"free=$(df -B1 --output=avail {state} | tail -1); "
                     f"head -c $((free - 3000000)) /dev/zero > {state}/filler")
            # the orchestrator sees it: heartbeats carry the free bytes
            until("the low free disk shown by the API",
                  lambda: fleet.get(f"/api/v1/nodes/{node}")["disk_free_bytes"] < floor,
                  timeout_s=30)
            refused = fleet.submit(node, "op0", **SHORT)
            run = fleet.wait(refused, FINAL, timeout_s=120)
            assert run["state"] == "failed", story(run)
            assert run["reason"].startswith("node disk too full: "), story(run)
            assert f" MB free in {state}, the run needs ~" in run["reason"], story(run)
            assert "2 bundles" in run["reason"] and "upload the spool" in run["reason"]
            assert run["charged_bytes"] == 0, story(run)  # its reservation released
            assert bundle_sums(name, state) == sums  # nothing deleted to make room
        # uploads go through again: the earlier bundles go up
        for run_id in earlier:
            done = fleet.wait(run_id, FINAL, timeout_s=180)
            assert done["state"] == "done", story(done)
        until("the spool emptied", lambda: spooled(name, state) == [], timeout_s=30)
        sh(name, f"rm {state}/filler")  # space freed: the next run runs
        after = fleet.submit(node, "op0", **SHORT)
        run = fleet.wait(after, FINAL, timeout_s=180)
        assert run["state"] == "done", story(run)
    runs = [*earlier, refused, after]
    until("the runs' series ingested", ingested(fleet, [*earlier, after]), timeout_s=60)
    result = audit(fleet, runs, expected_not_done={refused: "node disk too full"})
    assert result.problems() == [], result
    record(5, "node disk full (64 MiB tmpfs state dir, filled to 3 MB free)", result,
           wall_s=round(time.monotonic() - started))


def test_row9_a_restart_with_three_spooled_bundles_uploads_each_once(
    fleet: Fleet,
) -> None:
    started = time.monotonic()
    node, name = "se-01", container("se-01")
    state = "/var/lib/testbed-agent"
    fleet.wait_online(node, timeout_s=120)
    with uploads_dropped(name):
        runs = [fleet.submit(node, "op0", **SHORT) for _ in range(3)]
        until("three bundles spooled", lambda: spooled(name, state) == sorted(runs),
              timeout_s=180)
        until("the three runs reported uploading",
              lambda: states(fleet, runs) == ["uploading"] * 3, timeout_s=60)
        sums = bundle_sums(name, state)
        with partitioned(name):
            docker("restart", name)
            until("the agent back", lambda: agent_running(name), timeout_s=60)
            assert bundle_sums(name, state) == sums  # the restart kept the spool
            time.sleep(5)  # out of contact a while: nothing changes on the orchestrator
            assert states(fleet, runs) == ["uploading"] * 3
    for run_id in runs:
        run = fleet.wait(run_id, FINAL, timeout_s=240)
        assert run["state"] == "done", story(run)
    until("the spool emptied", lambda: spooled(name, state) == [], timeout_s=30)
    until("the runs' series ingested", ingested(fleet, runs), timeout_s=60)
    result = audit(fleet, runs)
    assert result.problems() == [], result
    record(9, "node restarted with 3 bundles in its spool (control link cut)", result,
           wall_s=round(time.monotonic() - started))
