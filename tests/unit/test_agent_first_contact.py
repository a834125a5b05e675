"""A node started beside its orchestrator (the compose stack, a fleet powered on
together) registers soon after the orchestrator first answers, and says so quietly
while it does not: a node out of contact is normal, not a warning."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from node_agent.agent import EAGER_BEATS
from node_agent.errors import OrchestratorUnreachable
from node_agent.runner import RunOutcome
from testbed_common.states import RunState
from testbed_common.wire import RegistrationReply
from tests.unit.test_agent_measured_bytes import NoCounters, agent, assignment


class StartingOrchestrator:
    """Refuses the first ``down`` registrations (nothing listens yet), then answers."""

    def __init__(self, down: int) -> None:
        self.down = down
        self.calls = 0

    def register(self, body: Any) -> RegistrationReply:
        self.calls += 1
        if self.calls <= self.down:
            raise OrchestratorUnreachable("POST /register: ConnectError: refused")
        return RegistrationReply(node_id="se-01", heartbeat_interval_s=2, active_run_ids=[])


def test_registration_is_retried_within_a_second_or_so_and_quietly(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a = agent(tmp_path, RunOutcome(RunState.UPLOADING, "finished"))
    orchestrator = StartingOrchestrator(down=8)
    a.client = orchestrator  # type: ignore[assignment]
    a.counters = NoCounters()
    waits: list[float] = []

    def sleep(seconds: float) -> bool:
        waits.append(seconds)
        return True
    a._sleep = sleep  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="node_agent"):
        assert a._register()
    assert orchestrator.calls == 9
    # eight tries within about five seconds: the node registers within about a second
    # and a half of the orchestrator's first answer, however long it took to start
    assert sum(waits) < 6 and max(waits) < 1.5
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("cannot register" in r.getMessage() for r in caplog.records)


def test_a_node_that_holds_nothing_polls_sooner_for_its_first_beats(tmp_path: Path) -> None:
    """Its first run, submitted as soon as the node is seen online, is handed out within
    a quarter of the heartbeat interval; the node comes back to the interval after a
    few beats, or at once when it holds a run."""
    a = agent(tmp_path, RunOutcome(RunState.UPLOADING, "finished"))
    a.client = StartingOrchestrator(down=0)  # type: ignore[assignment]
    a.counters = NoCounters()
    assert a._register()  # the orchestrator asks for a heartbeat every 2 s
    pauses = [a._next_beat_s() for _ in range(EAGER_BEATS + 2)]
    assert pauses == [0.5] * EAGER_BEATS + [2.0, 2.0]

    assert a._register()
    assert a._next_beat_s() == 0.5
    a.book.offer([assignment()])
    assert a._next_beat_s() == 2.0
    a.book.cancel("r-1")
    assert a._next_beat_s() == 2.0  # it had work: no eager beats until it registers again
