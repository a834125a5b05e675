"""The node's assignment book: ordering, de-duplication, persistence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from node_agent.assignments import (
    MIN_SLOT_LEFT,
    AssignmentBook,
    load_book,
    missed_reason,
    save_book,
    slot_left,
)
from testbed_common.wire import Assignment

T0 = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)


def _a(run_id: str, start_s: float, slot_s: float = 60) -> Assignment:
    return Assignment(
        run_id=run_id, experiment="tat", image="testbed/exp-tat:1",
        parameters={"duration_s": 10}, interface="op0",
        not_before=T0 + timedelta(seconds=start_s),
        deadline=T0 + timedelta(seconds=start_s + slot_s), max_bytes=10_000_000,
    )


def test_next_due_is_the_earliest_started_slot() -> None:
    book = AssignmentBook()
    book.offer([_a("r-2", 20), _a("r-1", 10), _a("r-3", 300)])
    assert book.next_due(T0) is None
    assert book.seconds_until_next(T0) == 10
    due = book.next_due(T0 + timedelta(seconds=25))
    assert due is not None and due.run_id == "r-1"


def test_resent_assignments_are_ignored() -> None:
    book = AssignmentBook()
    assert [a.run_id for a in book.offer([_a("r-1", 0)])] == ["r-1"]
    assert book.offer([_a("r-1", 0)]) == []
    book.take("r-1")
    # The orchestrator may re-send until it sees the run started: never run it twice.
    assert book.offer([_a("r-1", 0)]) == [] and book.pending_ids == []
    assert book.knows("r-1")


def test_cancel_and_missed() -> None:
    book = AssignmentBook([_a("r-1", 0, slot_s=10), _a("r-2", 0, slot_s=100)])
    assert [a.run_id for a in book.missed(T0 + timedelta(seconds=50))] == ["r-1"]
    assert book.cancel("r-2") is not None and book.cancel("r-2") is None
    assert book.pending_ids == ["r-1"]


@pytest.mark.parametrize(("at_s", "missed"), [
    (-30, False),  # not begun
    (0, False), (16, False),  # a 25 s TAT slot: 9 s left still holds a 10 s TAT's start
    (17, True), (24, True),  # 8 s and 1 s left: it would be stopped at the deadline
    (25, True), (90, True),  # the deadline passed
])
def test_a_run_is_missed_once_less_than_a_third_of_its_slot_is_left(
        at_s: float, missed: bool) -> None:
    book = AssignmentBook([_a("r-1", 0, slot_s=25)])
    now = T0 + timedelta(seconds=at_s)
    assert [a.run_id for a in book.missed(now)] == (["r-1"] if missed else [])
    assert (slot_left(_a("r-1", 0, slot_s=25), now) < MIN_SLOT_LEFT) == missed


def test_what_the_node_says_of_a_missed_run() -> None:
    a = _a("r-1", 0, slot_s=25)
    assert missed_reason(a, T0 + timedelta(seconds=30)) == (
        "missed: the node could not start the run before its deadline "
        "(2026-11-22T02:00:25+00:00)")
    assert missed_reason(a, T0 + timedelta(seconds=18)) == (
        "missed: the node could start the run only 7 s before its deadline "
        "(2026-11-22T02:00:25+00:00), with less than 33% of its 25 s slot left; it was "
        "not started, as it would have been stopped at the deadline with its traffic "
        "spent")


def test_a_slot_of_no_length_is_whole_until_its_deadline() -> None:
    a = _a("r-1", 0, slot_s=0)
    assert slot_left(a, T0 - timedelta(seconds=1)) == 1.0 and slot_left(a, T0) == 0.0


def test_book_survives_a_restart(tmp_path: Path) -> None:
    book = AssignmentBook()
    book.offer([_a("r-1", 0), _a("r-2", 5)])
    book.take("r-1")
    save_book(book, tmp_path / "assignments.json")
    again = load_book(tmp_path / "assignments.json")
    assert again.pending_ids == ["r-2"] and again.knows("r-1")
    assert load_book(tmp_path / "missing.json").pending_ids == []
