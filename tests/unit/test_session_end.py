"""A run's session sees its container's end when it comes, not at the next meter
reading (node_agent.session): the time between an experiment's end and its result is
every run's, the first one's on a warm start included."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from node_agent.engine import ContainerId, Holder
from node_agent.hooks import RunHook
from node_agent.interfaces import Counters
from node_agent.runner import RunOutcome
from node_agent.session import RunSession, StopRequest
from node_agent.spec import build_spec
from testbed_common.states import RunState
from tests.engines import FillingEngine
from tests.unit.test_agent_measured_bytes import NOW, agent, assignment

#: Far longer than the container runs: a session that waited out the interval would
#: take this long.
METER_INTERVAL_S = 5.0


class EndingEngine(FillingEngine):
    """A container that ends ``after_s`` seconds after its start, with no results."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self.ended = threading.Event()
        self.looked = 0

    def start(self, container: ContainerId) -> None:
        threading.Timer(self.after_s, self.ended.set).start()

    def running(self, container: ContainerId) -> bool:
        self.looked += 1
        return not self.ended.is_set()

    def await_end(self, container: ContainerId, *, within_s: float) -> None:
        self.ended.wait(within_s)

    def kill(self, container: ContainerId) -> bool:
        self.ended.set()
        return True

    def collect(self, container: ContainerId, holder: Holder, run_dir: Path) -> str:
        return ""


class Still:
    def read(self, name: str) -> Counters:
        return Counters(rx_bytes=0, tx_bytes=0)


def test_the_session_ends_with_its_container_not_at_the_next_reading(tmp_path: Path) -> None:
    config = agent(tmp_path, RunOutcome(RunState.UPLOADING, "unused")).config
    spec = build_spec(assignment(), config, interface_address="10.0.0.2")
    engine = EndingEngine(after_s=0.3)
    began = time.monotonic()
    outcome = RunSession(spec, tmp_path / "run", engine=engine, counters=Still(),
                         interfaces=["op0"], meter_interval_s=METER_INTERVAL_S,
                         clock=lambda: NOW).run(on_running=lambda: None, stop=StopRequest())
    took = time.monotonic() - began
    assert outcome.state == RunState.UPLOADING, outcome.reason
    assert 0.3 <= took < 1.5, took
    assert engine.looked == 2  # one reading while it ran, one that found it ended


class EndedAsStoppedEngine(EndingEngine):
    """A container seen running once, which has ended by the time the stop's kill
    reaches the engine (the engine's 409, "is not running")."""

    def start(self, container: ContainerId) -> None:
        pass

    def running(self, container: ContainerId) -> bool:
        self.looked += 1
        return self.looked == 1

    def kill(self, container: ContainerId) -> bool:
        self.ended.set()
        return False


def test_a_stop_that_crosses_the_experiments_own_end_keeps_its_results(
        tmp_path: Path) -> None:
    """The demo's first run on a loaded machine failed with "lost track of the
    experiment container" when its stop came as its container ended: an experiment that
    finished ends by its exit code, and its results go up."""
    config = agent(tmp_path, RunOutcome(RunState.UPLOADING, "unused")).config
    spec = build_spec(assignment(), config, interface_address="10.0.0.2")
    stop = StopRequest()
    stop.set(RunState.CANCELLED, "cancelled by its owner")
    outcome = RunSession(spec, tmp_path / "run", engine=EndedAsStoppedEngine(after_s=0),
                         counters=Still(), interfaces=["op0"],
                         meter_interval_s=METER_INTERVAL_S,
                         clock=lambda: NOW).run(on_running=lambda: None, stop=stop)
    assert outcome.state == RunState.UPLOADING, outcome.reason
    assert outcome.exit_code == 0


class MeetingSidecar(RunHook):
    """A sidecar whose prestart returns only once every other one's has begun (each
    capture waits for its own tcpdump to listen): started one after the other, the
    first would wait for the second forever, and the barrier breaks."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier
        self.met = False
        self.done_at = 0.0

    def prestart(self) -> None:
        try:
            self.barrier.wait()
            self.met = True
        except threading.BrokenBarrierError:
            pass
        self.done_at = time.monotonic()



class StartNotingEngine(EndingEngine):
    def start(self, container: ContainerId) -> None:
        self.started_at = time.monotonic()
        super().start(container)


def test_the_sidecars_start_together_and_the_container_after_both(tmp_path: Path) -> None:
    """The node's and the server's captures each wait for their tcpdump to listen, a
    few tenths of a second on a loaded node: the container's start, every run's, waited
    for the two in turn (bench/RESULTS.md)."""
    config = agent(tmp_path, RunOutcome(RunState.UPLOADING, "unused")).config
    spec = build_spec(assignment(), config, interface_address="10.0.0.2")
    barrier = threading.Barrier(2, timeout=5)
    sidecars = [MeetingSidecar(barrier), MeetingSidecar(barrier)]
    engine = StartNotingEngine(after_s=0)
    outcome = RunSession(spec, tmp_path / "run", engine=engine, counters=Still(),
                         interfaces=["op0"], hooks=sidecars,
                         meter_interval_s=METER_INTERVAL_S,
                         clock=lambda: NOW).run(on_running=lambda: None, stop=StopRequest())
    assert outcome.state == RunState.UPLOADING, outcome.reason
    assert all(s.met for s in sidecars)
    assert engine.started_at >= max(s.done_at for s in sidecars)
