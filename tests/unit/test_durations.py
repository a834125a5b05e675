"""Durations as people say them (model.durations), the one formatter of run notes,
``testbed run wait`` and the fleet page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.cli import progress
from orchestrator.model.durations import spoken
from orchestrator.pages.fleet import _ago

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(("seconds", "words"), [
    (0, "0 s"), (-3, "0 s"), (40, "40 s"), (59.4, "59 s"), (100, "1 min 40 s"),
    (120, "2 min"), (3600, "1 h"), (3725, "1 h 2 min"), (7500, "2 h 5 min"),
    (86400, "1 day"), (90000, "1 day 1 h"), (7 * 86400, "7 days"),
    (2 * 86400 + 7200, "2 days 2 h"),
])
def test_spans_are_said_as_people_say_them(seconds: float, words: str) -> None:
    assert spoken(seconds) == words


def test_the_fleet_page_says_when_a_node_was_last_heard_in_the_same_words() -> None:
    assert _ago(None, NOW) == "never"
    assert _ago(NOW - timedelta(seconds=100), NOW) == "1 min 40 s ago"
    assert _ago(NOW - timedelta(hours=3), NOW) == "3 h ago"
    assert _ago(NOW + timedelta(seconds=2), NOW) == "0 s ago"  # its clock a little ahead


def test_run_wait_says_a_slot_in_the_same_words() -> None:
    run = {"state": "scheduled", "not_before": (NOW + timedelta(seconds=100)).isoformat(),
           "deadline": (NOW + timedelta(hours=1)).isoformat()}
    assert progress.slot(run, NOW) == "slot starts in 1 min 40 s"
