"""When a run's session stops the experiment, and what the run reports: a pure function
of what the session observed (node_agent.limits.decide), no container engine needed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from node_agent.limits import Observation, Requested, StopCause, StopDecision, decide, ended
from node_agent.session import StopRequest
from testbed_common.states import RunState

T0 = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
CANCEL = Requested(RunState.CANCELLED, "cancelled by the orchestrator")


def obs(*, now: datetime = T0, used: int = 0, cap: int = 1000, spent: bool = False,
        requested: Requested | None = None) -> Observation:
    return Observation(now=now, deadline=T0 + timedelta(minutes=1), used_bytes=used,
                       max_bytes=cap, quota_spent=spent, requested=requested)


def test_a_run_within_its_limits_goes_on() -> None:
    assert decide(obs(used=1000, now=T0 + timedelta(seconds=59))) is None  # at, not over


def test_over_the_reservation_on_the_counters() -> None:
    assert decide(obs(used=1001)) == StopDecision(
        StopCause.OVERRUN, RunState.FAILED,
        "traffic reservation exceeded: used 1001 of 1000 bytes")


def test_a_spent_kernel_quota_stops_the_run_before_the_counters_show_it() -> None:
    decision = decide(obs(used=990, spent=True))
    assert decision == StopDecision(
        StopCause.QUOTA_SPENT, RunState.FAILED,
        "traffic reservation exceeded: the kernel quota of 1000 bytes is spent and drops "
        "the run's packets (interface counters: 990 bytes)")


def test_at_the_deadline() -> None:
    assert decide(obs(now=T0 + timedelta(minutes=1))) == StopDecision(
        StopCause.DEADLINE, RunState.FAILED,
        "exceeded its time slot (deadline 2026-11-22T02:01:00+00:00)")


@pytest.mark.parametrize("requested", [
    CANCEL,
    Requested(RunState.FAILED, "node agent stopped during the run (SIGTERM)"),
    Requested(RunState.FAILED, "run is already final on the orchestrator; stopped"),
])
def test_a_stop_request_ends_the_run_with_its_own_state_and_reason(
        requested: Requested) -> None:
    assert decide(obs(requested=requested)) == StopDecision(
        StopCause.REQUESTED, requested.state, requested.reason)


@pytest.mark.parametrize(("seen", "cause"), [
    # the counters' overrun is named (with its figure) before the quota that saw it
    ({"used": 1001, "spent": True, "late": True, "requested": CANCEL}, StopCause.OVERRUN),
    ({"used": 1001, "late": True}, StopCause.OVERRUN),
    ({"spent": True, "late": True, "requested": CANCEL}, StopCause.QUOTA_SPENT),
    ({"late": True, "requested": CANCEL}, StopCause.DEADLINE),
    # a run over its limits fails for them, even when a cancellation came with them
    ({"used": 1001, "requested": CANCEL}, StopCause.OVERRUN),
])
def test_precedence_overrun_quota_deadline_request(seen: dict[str, object],
                                                   cause: StopCause) -> None:
    late = T0 + timedelta(minutes=2) if seen.pop("late", False) else T0
    decision = decide(obs(now=late, **seen))  # type: ignore[arg-type]
    assert decision is not None and decision.cause == cause
    assert decision.state == (RunState.FAILED if cause != StopCause.REQUESTED else CANCEL.state)


def test_how_the_run_ends() -> None:
    stopped = decide(obs(requested=CANCEL))
    assert ended(stopped, exit_code=137, stderr="killed") == (
        RunState.CANCELLED, "cancelled by the orchestrator")
    assert ended(None, exit_code=0, stderr="done\n") == (
        RunState.UPLOADING, "experiment finished; uploading its results")
    assert ended(None, exit_code=1, stderr="tat failed: connection refused\n") == (
        RunState.FAILED, "experiment exited with code 1: tat failed: connection refused")


def test_the_first_stop_request_wins() -> None:
    stop = StopRequest()
    assert stop.requested() is None and not stop.is_set()
    stop.set(RunState.CANCELLED, "cancelled by the orchestrator")
    stop.set(RunState.FAILED, "node agent stopped during the run (SIGTERM)")
    assert stop.requested() == CANCEL
