"""Run states and node health: pure rules."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.model.health import node_health
from testbed_common.states import FINAL_STATES, RunState, can_move

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("final", sorted(FINAL_STATES))
def test_final_states_have_no_way_out(final: RunState) -> None:
    # The one exception: a cancelled run its node ran offline before it learned of the
    # cancellation becomes done through its bundle (services.uploads), and only so.
    allowed = {RunState.DONE} if final == RunState.CANCELLED else set()
    assert {s for s in RunState if can_move(final, s)} == allowed


def test_happy_path_is_allowed_and_going_back_is_not() -> None:
    path = [RunState.SCHEDULED, RunState.ASSIGNED, RunState.DEPLOYING, RunState.RUNNING,
            RunState.UPLOADING, RunState.DONE]
    assert all(can_move(a, b) for a, b in itertools.pairwise(path))
    assert not can_move(RunState.RUNNING, RunState.ASSIGNED)


@pytest.mark.parametrize(("silent_s", "expected"), [
    (0, "online"), (29, "online"), (30, "stale"), (99, "stale"), (100, "offline")])
def test_health_from_silence(silent_s: int, expected: str) -> None:
    h = node_health(now=NOW, last_heartbeat=NOW - timedelta(seconds=silent_s),
                    maintenance=False, interval_s=10, stale_after_beats=3,
                    offline_after_beats=10)
    assert h.value == expected


def test_maintenance_and_new() -> None:
    kw = {"now": NOW, "interval_s": 10.0, "stale_after_beats": 3.0, "offline_after_beats": 10.0}
    assert node_health(last_heartbeat=None, maintenance=False, **kw).value == "new"
    assert node_health(last_heartbeat=NOW, maintenance=True, **kw).value == "maintenance"
