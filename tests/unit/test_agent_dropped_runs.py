"""The agent tells the orchestrator which runs it dropped from its book unstarted, so
that a cancelled run's held reservation is released; it says so until a heartbeat
carrying them is answered, and a restart does not lose them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from node_agent.agent import Agent
from node_agent.assignments import REPORTED_DROPS, AssignmentBook, load_book, save_book
from node_agent.config import parse_config
from node_agent.errors import AgentError
from node_agent.interfaces import Counters
from testbed_common.wire import Assignment, Heartbeat, HeartbeatReply

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def _a(run_id: str, start_s: float = 3600) -> Assignment:
    return Assignment(run_id=run_id, experiment="tat", image="testbed/exp-tat:1",
                      parameters={}, interface="op0",
                      not_before=NOW + timedelta(seconds=start_s),
                      deadline=NOW + timedelta(seconds=start_s + 60), max_bytes=10**6)


def test_a_pending_run_dropped_on_a_cancel_is_kept_until_acknowledged(tmp_path: Path) -> None:
    book = AssignmentBook([_a("r-1"), _a("r-2")])
    book.take("r-2")
    assert book.cancel("r-1") is not None
    assert book.cancel("r-2") is None  # started: not a drop
    assert book.cancel("r-9") is None  # never held: not a drop
    assert book.dropped_ids == ["r-1"]
    save_book(book, tmp_path / "assignments.json")
    again = load_book(tmp_path / "assignments.json")
    assert again.dropped_ids == ["r-1"]  # survives a restart
    again.acknowledge_dropped(["r-1", "r-7"])
    assert again.dropped_ids == []


def test_dropped_ids_are_bounded_as_the_wire_bounds_them() -> None:
    book = AssignmentBook([_a(f"r-{i}") for i in range(REPORTED_DROPS + 5)])
    for i in range(REPORTED_DROPS + 5):
        book.cancel(f"r-{i}")
    assert len(book.dropped_ids) == REPORTED_DROPS
    assert book.dropped_ids[0] == "r-5"  # the oldest go first
    Heartbeat(sent_at=NOW, interfaces=[], disk_free_bytes=1, dropped_run_ids=book.dropped_ids)
    with pytest.raises(ValidationError):
        Heartbeat(sent_at=NOW, interfaces=[], disk_free_bytes=1,
                  dropped_run_ids=[*book.dropped_ids, "r-x"])


class ZeroCounters:
    def read(self, name: str) -> Counters:
        return Counters(0, 0)


class Orchestrator:
    """Answers heartbeats: cancels r-1 at once, loses the reply to the next one."""

    def __init__(self) -> None:
        self.sent: list[Heartbeat] = []
        self.agent: Agent | None = None

    def heartbeat(self, body: Heartbeat) -> HeartbeatReply:
        self.sent.append(body)
        n = len(self.sent)
        if n == 2:
            raise AgentError("connection reset")  # the reply is lost
        if n == 4 and self.agent is not None:
            self.agent.stop("test over")
        return HeartbeatReply(server_time=NOW, heartbeat_interval_s=0, assignments=[],
                              cancel_run_ids=["r-1"] if n == 1 else [])


def test_the_agent_reports_a_dropped_run_until_a_heartbeat_is_answered(
        tmp_path: Path) -> None:
    config = parse_config({
        "node_id": "se-01", "orchestrator_url": "http://orchestrator:8080",
        "state_dir": str(tmp_path), "netns_container": "ns",
        "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
                        "address": "10.0.0.2", "server_address": "10.0.0.1"}],
    }, {"TESTBED_NODE_TOKEN": "tok"})
    orchestrator = Orchestrator()
    agent = Agent(config, client=orchestrator, runner=None,  # type: ignore[arg-type]
                  counters=ZeroCounters(), clock=lambda: NOW)
    orchestrator.agent = agent
    agent.heartbeat_interval_s = 0
    agent.book.offer([_a("r-1"), _a("r-2")])
    agent._heartbeat_loop()
    sent = [(hb.pending_run_ids, hb.dropped_run_ids) for hb in orchestrator.sent]
    assert sent == [
        (["r-1", "r-2"], []),  # then told r-1 is cancelled: dropped unstarted
        (["r-2"], ["r-1"]),  # reply lost
        (["r-2"], ["r-1"]),  # said again, answered
        (["r-2"], []),
    ]
    assert load_book(tmp_path / "assignments.json").dropped_ids == []
