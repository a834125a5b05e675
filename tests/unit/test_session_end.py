"""A run's session sees its container's end when it comes, not at the next meter
reading (node_agent.session): the time between an experiment's end and its result is
every run's, the first one's on a warm start included."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from node_agent.config import parse_config
from node_agent.engine import ContainerId
from node_agent.interfaces import Counters
from node_agent.session import RunSession, StopRequest
from node_agent.spec import build_spec
from testbed_common.states import RunState
from testbed_common.wire import Assignment

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
#: Far longer than the container runs: a session that waited out the interval would
#: take this long.
METER_INTERVAL_S = 5.0


class EndingEngine:
    """A container that ends ``after_s`` seconds after its start."""

    def __init__(self, after_s: float) -> None:
        self.after_s = after_s
        self.ended = threading.Event()
        self.looked = 0

    def remove_leftovers(self) -> list[str]:
        return []

    def ensure_image(self, image: str) -> str:
        return "sha256:exp"

    def create(self, spec: object) -> ContainerId:
        return ContainerId("c")

    def start(self, container: ContainerId) -> None:
        threading.Timer(self.after_s, self.ended.set).start()

    def running(self, container: ContainerId) -> bool:
        self.looked += 1
        return not self.ended.is_set()

    def await_end(self, container: ContainerId, *, within_s: float) -> None:
        self.ended.wait(within_s)

    def kill(self, container: ContainerId) -> None:
        self.ended.set()

    def wait(self, container: ContainerId, *, timeout_s: float) -> int:
        return 0

    def collect(self, container: ContainerId, run_dir: Path) -> str:
        return ""

    def remove(self, container: ContainerId) -> None: ...


class Still:
    def read(self, name: str) -> Counters:
        return Counters(rx_bytes=0, tx_bytes=0)


def test_the_session_ends_with_its_container_not_at_the_next_reading(tmp_path: Path) -> None:
    config = parse_config({
        "node_id": "se-01", "orchestrator_url": "http://orchestrator:8080",
        "state_dir": str(tmp_path), "netns_container": "ns",
        "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
                        "address": "10.0.0.2", "server_address": "10.0.0.1"}],
    }, {"TESTBED_NODE_TOKEN": "tok"})
    spec = build_spec(Assignment(run_id="r-1", experiment="tat", image="testbed/exp-tat:1",
                                 parameters={}, interface="op0", not_before=NOW,
                                 deadline=NOW + timedelta(minutes=1), max_bytes=10**6),
                      config, interface_address="10.0.0.2")
    engine = EndingEngine(after_s=0.3)
    began = time.monotonic()
    outcome = RunSession(spec, tmp_path / "run", engine=engine, counters=Still(),
                         interfaces=["op0"], meter_interval_s=METER_INTERVAL_S,
                         clock=lambda: NOW).run(on_running=lambda: None, stop=StopRequest())
    took = time.monotonic() - began
    assert outcome.state == RunState.UPLOADING, outcome.reason
    assert 0.3 <= took < 1.5, took
    assert engine.looked == 2  # one reading while it ran, one that found it ended
