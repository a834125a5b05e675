"""The agent reports the bytes it metered with the report that ends a run's traffic, so
the orchestrator can settle the run's quota reservation."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from node_agent.agent import RESTART_LOST, Agent
from node_agent.config import parse_config
from node_agent.interfaces import Counters
from node_agent.runner import RunOutcome, StopRequest
from testbed_common.states import RunState
from testbed_common.wire import Assignment, RegistrationReply, StateReport

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


class FakeRunner:
    """Stands in for the Docker runner: returns a fixed outcome, writes a result."""

    def __init__(self, outcome: RunOutcome) -> None:
        self.outcome = outcome

    def run(self, spec: Any, run_dir: Path, *, on_running: Callable[[], None],
            stop: StopRequest) -> RunOutcome:
        (run_dir / "results").mkdir(parents=True, exist_ok=True)
        (run_dir / "results" / "tat.json").write_text("{}")
        if self.outcome.started_at is not None:
            on_running()
        return self.outcome


def agent(tmp_path: Path, outcome: RunOutcome) -> Agent:
    config = parse_config({
        "node_id": "se-01", "orchestrator_url": "http://orchestrator:8080",
        "state_dir": str(tmp_path), "netns_container": "ns",
        "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
                        "address": "10.0.0.2", "server_address": "10.0.0.1"}],
    }, {"TESTBED_NODE_TOKEN": "tok"})
    return Agent(config, client=None, runner=FakeRunner(outcome),  # type: ignore[arg-type]
                 counters=None, clock=lambda: NOW)  # type: ignore[arg-type]


def assignment() -> Assignment:
    return Assignment(run_id="r-1", experiment="tat", image="testbed/exp-tat:1",
                      parameters={}, interface="op0", not_before=NOW,
                      deadline=NOW + timedelta(minutes=1), max_bytes=10**6)


def reports(a: Agent) -> list[tuple[RunState, int | None]]:
    return [(p.report.state, p.report.measured_bytes) for p in a.outbox.pending()]


def test_final_report_carries_the_metered_bytes(tmp_path: Path) -> None:
    a = agent(tmp_path, RunOutcome(RunState.UPLOADING, "finished", exit_code=0,
                                   started_at=NOW, ended_at=NOW, bytes_used=123_456))
    a.execute(assignment(), StopRequest())
    assert reports(a) == [(RunState.DEPLOYING, None), (RunState.RUNNING, None),
                          (RunState.UPLOADING, 123_456)]


def test_run_that_never_started_reports_no_measurement(tmp_path: Path) -> None:
    a = agent(tmp_path, RunOutcome(RunState.FAILED, "image missing"))
    a.execute(assignment(), StopRequest())
    assert reports(a) == [(RunState.DEPLOYING, None), (RunState.FAILED, None)]


class NoCounters:
    def read(self, name: str) -> Counters:
        return Counters(0, 0)


class Registrar:
    """Stands in for the orchestrator's register call: these runs are active there."""

    def __init__(self, active: list[str]) -> None:
        self.active = active

    def register(self, body: Any) -> Any:
        return RegistrationReply(node_id="se-01", heartbeat_interval_s=2,
                                 active_run_ids=self.active)


def test_a_run_killed_before_its_running_report_went_out_is_reported_lost(
        tmp_path: Path) -> None:
    """The agent died with "running" still in its outbox: the new life does not hold
    that run (nothing runs it), so it reports it lost after the stale reports. A run
    whose outcome is still to be reported is held, not reported lost."""
    first = agent(tmp_path, RunOutcome(RunState.UPLOADING, "finished"))
    first.outbox.put("r-killed", StateReport(state=RunState.RUNNING, reason="started",
                                             at=NOW))
    first.outbox.put("r-ended", StateReport(state=RunState.UPLOADING, reason="finished",
                                            at=NOW, measured_bytes=10))
    again = agent(tmp_path, RunOutcome(RunState.UPLOADING, "finished"))
    again.client = Registrar(["r-killed", "r-ended"])  # type: ignore[assignment]
    again.counters = NoCounters()
    assert again._register()
    assert [(p.run_id, p.report.state) for p in again.outbox.pending()] == [
        ("r-killed", RunState.RUNNING), ("r-ended", RunState.UPLOADING),
        ("r-killed", RunState.FAILED)]
    assert again.outbox.pending()[-1].report.reason == RESTART_LOST
