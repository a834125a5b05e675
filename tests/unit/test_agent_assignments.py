"""The node's assignment book: ordering, de-duplication, persistence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from node_agent.assignments import AssignmentBook, load_book, save_book
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


def test_book_survives_a_restart(tmp_path: Path) -> None:
    book = AssignmentBook()
    book.offer([_a("r-1", 0), _a("r-2", 5)])
    book.take("r-1")
    save_book(book, tmp_path / "assignments.json")
    again = load_book(tmp_path / "assignments.json")
    assert again.pending_ids == ["r-2"] and again.knows("r-1")
    assert load_book(tmp_path / "missing.json").pending_ids == []
