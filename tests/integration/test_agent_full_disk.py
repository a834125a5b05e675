"""The agent on a full disk, on a real (tiny) file system: a run is refused before it
starts when the state disk is nearly full, and a bundle that does not fit fails its
run with the reason while the results stay on the node.

The state directory is a 4 MiB tmpfs mounted for the test (needs root)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from node_agent.agent import Agent
from node_agent.config import parse_config
from node_agent.runner import RunOutcome, StopRequest
from testbed_common.states import RunState
from testbed_common.wire import Assignment
from tests.conftest import require_root, require_tools

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    require_root("mounting a small tmpfs")
    require_tools("mount", "umount")
    mnt = tmp_path / "state"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


class Runner:
    """The Docker runner's stand-in: the experiment writes ``result_bytes`` of results."""

    def __init__(self, result_bytes: int) -> None:
        self.result_bytes = result_bytes
        self.started = 0

    def run(self, spec: Any, run_dir: Path, *, on_running: Callable[[], None],
            stop: StopRequest) -> RunOutcome:
        self.started += 1
        on_running()
        (run_dir / "results").mkdir(parents=True, exist_ok=True)
        # incompressible, as a packet capture's payload is
        (run_dir / "results" / "capture.bin").write_bytes(os.urandom(self.result_bytes))
        return RunOutcome(RunState.UPLOADING, "finished", exit_code=0, started_at=NOW,
                          ended_at=NOW, bytes_used=1000)


def agent(state: Path, runner: Runner, min_free: int) -> Agent:
    config = parse_config({
        "node_id": "se-01", "orchestrator_url": "http://orchestrator:8080",
        "state_dir": str(state), "netns_container": "ns", "min_free_disk_bytes": min_free,
        "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
                        "address": "10.0.0.2", "server_address": "10.0.0.1"}],
    }, {"TESTBED_NODE_TOKEN": "tok"})
    return Agent(config, client=None, runner=runner,  # type: ignore[arg-type]
                 counters=None, clock=lambda: NOW)  # type: ignore[arg-type]


def assignment(run_id: str) -> Assignment:
    return Assignment(run_id=run_id, experiment="tat", image="testbed/exp-tat:1",
                      parameters={}, interface="op0", not_before=NOW,
                      deadline=NOW + timedelta(minutes=1), max_bytes=10**6)


def reports(a: Agent, run_id: str) -> list[tuple[RunState, str]]:
    return [(p.report.state, p.report.reason) for p in a.outbox.pending()
            if p.run_id == run_id]


def test_a_nearly_full_disk_refuses_the_run_before_it_starts(small_disk: Path) -> None:
    runner = Runner(result_bytes=1000)
    a = agent(small_disk, runner, min_free=2 * 10**6)
    (small_disk / "old-data").write_bytes(os.urandom(3 * 2**20))  # 3 of its 4 MiB
    outcome = a.execute(assignment("r-full"), StopRequest())
    assert outcome.state == RunState.FAILED and runner.started == 0
    [(state, reason)] = reports(a, "r-full")
    assert state == RunState.FAILED
    assert reason.startswith(f"node disk nearly full: 1 MB free in {small_disk}, runs need "
                             "at least 2 MB (min_free_disk_bytes)"), reason


def test_a_bundle_that_does_not_fit_fails_the_run_and_keeps_the_results(
    small_disk: Path,
) -> None:
    runner = Runner(result_bytes=int(2.5 * 2**20))  # results fit, results + bundle do not
    a = agent(small_disk, runner, min_free=0)
    a.execute(assignment("r-big"), StopRequest())
    states = [s for s, _ in reports(a, "r-big")]
    assert states == [RunState.DEPLOYING, RunState.RUNNING, RunState.UPLOADING,
                      RunState.FAILED]
    reason = reports(a, "r-big")[-1][1]
    assert reason.startswith("node could not spool the run's bundle: No space left on "
                             "device; its results stay in"), reason
    kept = small_disk / "work" / "r-big" / "results" / "capture.bin"
    assert kept.stat().st_size == int(2.5 * 2**20)  # nothing lost
    assert a.spool.pending() == [] and not list((small_disk / "spool").glob("r-big*"))
