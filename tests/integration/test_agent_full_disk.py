"""The agent on a full disk, on a real (tiny) file system: a run whose captures and
bundle would not fit is refused before it starts, saying what to do, and the spool is
never trimmed to make room; a disk that fills during a run ends it with the reason,
loses neither its results nor earlier bundles, and its state reports still go out.

The state directory is a 4 MiB tmpfs mounted for the test (needs root)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from node_agent.agent import Agent
from node_agent.config import parse_config
from node_agent.interfaces import Counters
from node_agent.runner import RunOutcome, StopRequest
from node_agent.sender import flush_outbox
from node_agent.session import RunSession
from node_agent.spec import build_spec
from testbed_common.states import RunState
from testbed_common.wire import Assignment
from tests.conftest import require_root, require_tools
from tests.engines import FillingEngine

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


def assignment(run_id: str, max_bytes: int = 10**6) -> Assignment:
    return Assignment(run_id=run_id, experiment="tat", image="testbed/exp-tat:1",
                      parameters={}, interface="op0", not_before=NOW,
                      deadline=NOW + timedelta(minutes=1), max_bytes=max_bytes)


def reports(a: Agent, run_id: str) -> list[tuple[RunState, str]]:
    return [(p.report.state, p.report.reason) for p in a.outbox.pending()
            if p.run_id == run_id]


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` with another program's file until ``leave`` bytes are free."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    filler.write_bytes(b"\0" * max(0, free - leave))
    return filler


def spooled(a: Agent) -> dict[str, bytes]:
    return {item.run_id: item.path.read_bytes() for item in a.spool.pending()}


def test_a_run_that_does_not_fit_is_refused_and_the_spool_is_kept(small_disk: Path) -> None:
    runner = Runner(result_bytes=200_000)
    a = agent(small_disk, runner, min_free=10**6)
    for run_id in ("r-1", "r-2"):  # measured while offline: they wait in the spool
        assert a.execute(assignment(run_id), StopRequest()).state == RunState.UPLOADING
    before = spooled(a)
    assert list(before) == ["r-1", "r-2"]
    filler = fill(small_disk, leave=1_500_000)
    # a 10 MB reservation: two 1.12 MB capture copies and the 1 MB floor do not fit
    outcome = a.execute(assignment("r-3", max_bytes=10**7), StopRequest())
    assert outcome.state == RunState.FAILED and runner.started == 2
    [(state, reason)] = reports(a, "r-3")  # FAILED before DEPLOYING: nothing metered
    assert state == RunState.FAILED
    assert re.match(
        rf"node disk too full: 1 MB free in {small_disk}, the run needs ~4 MB \(~2 MB of "
        r"captures, as much again for its bundle, and 1 MB kept free, "
        r"min_free_disk_bytes\); upload the spool \(let the node reach the orchestrator: "
        r"2 bundles \(1 MB\) wait in the spool", reason), reason
    assert not [p for p in a.outbox.pending() if p.report.measured_bytes is not None
                and p.run_id == "r-3"]
    assert spooled(a) == before  # nothing deleted to make room
    # space freed: the next run runs
    filler.unlink()
    assert a.execute(assignment("r-4", max_bytes=10**7), StopRequest()).state \
        == RunState.UPLOADING
    assert list(spooled(a)) == ["r-1", "r-2", "r-4"]


class Filling(Runner):
    """An experiment during which another program fills the disk to the last byte."""

    def run(self, spec: Any, run_dir: Path, *, on_running: Callable[[], None],
            stop: StopRequest) -> RunOutcome:
        outcome = super().run(spec, run_dir, on_running=on_running, stop=stop)
        with contextlib.suppress(OSError), (run_dir.parent.parent / "filler").open("ab") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
        return outcome


def test_a_disk_that_fills_during_the_run_ends_it_with_a_reason_and_loses_nothing(
    small_disk: Path,
) -> None:
    a = agent(small_disk, Runner(result_bytes=100_000), min_free=0)
    a.execute(assignment("r-1"), StopRequest())
    before = spooled(a)
    a.runner = Filling(result_bytes=100_000)
    a.execute(assignment("r-2"), StopRequest())
    assert shutil.disk_usage(small_disk).free < 4096
    # the disk has no room for the state reports: they wait in memory, in order
    states = [s for s, _ in reports(a, "r-2")]
    assert states == [RunState.DEPLOYING, RunState.RUNNING, RunState.UPLOADING,
                      RunState.FAILED]
    reason = reports(a, "r-2")[-1][1]
    assert reason.startswith("node could not spool the run's bundle: No space left on "
                             "device; its results stay in"), reason
    assert "earlier bundles stay in the spool" in reason
    assert spooled(a) == before  # the earlier bundle is intact; no half bundle listed
    assert (small_disk / "work" / "r-2" / "results" / "capture.bin").stat().st_size \
        == 100_000
    # reports are delivered in order, from memory, once the orchestrator answers
    sent: list[tuple[str, RunState]] = []

    class Orchestrator:
        def report_state(self, run_id: str, report: Any) -> None:
            sent.append((run_id, report.state))

    flush_outbox(Orchestrator(), a.outbox, on_final=print)  # type: ignore[arg-type]
    assert [s for r, s in sent if r == "r-2"] == states and a.outbox.pending() == []


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


class Moving:
    """Interface counters that move 1000 bytes a read."""

    def __init__(self) -> None:
        self.n = 0

    def read(self, name: str) -> Counters:
        self.n += 1
        return Counters(rx_bytes=1000 * self.n, tx_bytes=0)


def test_a_disk_that_fills_while_results_are_copied_fails_the_run_with_the_reason(
    small_disk: Path,
) -> None:
    a = agent(small_disk, Runner(result_bytes=0), min_free=0)
    spec = build_spec(assignment("r-1"), a.config, interface_address="10.0.0.2")
    run_dir = small_disk / "work" / "r-1"
    outcome = RunSession(spec, run_dir, engine=FillingEngine(), counters=Moving(),
                         interfaces=["op0"], clock=lambda: NOW).run(
        on_running=lambda: None, stop=StopRequest())
    assert outcome.state == RunState.FAILED
    assert outcome.reason.startswith(
        "node disk filled during the run (No space left on device"), outcome.reason
    assert "its results are incomplete. Earlier bundles stay in the spool" in outcome.reason
    assert outcome.bytes_used > 0  # what it moved is still known, for its quota
