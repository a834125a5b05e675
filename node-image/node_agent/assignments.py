"""The node's book of assignments: which run to start next, and which it already knows.

Pure bookkeeping (the orchestrator re-sends assignments until it sees them started, so
the book de-duplicates); :func:`save_book`/:func:`load_book` persist it in the state
directory, so prefetched runs survive an agent restart.

The book also keeps the runs it dropped unstarted, cancelled or missed (:attr:`dropped_ids`):
the orchestrator holds a cancelled run's reservation until its node says it never ran it
(a node out of contact may run it before it learns of the cancel). They are persisted
with the book and reported in every heartbeat until one carrying them is answered
(:meth:`AssignmentBook.acknowledge_dropped`); the orchestrator's handling is idempotent,
so a lost reply only means they are sent again. At most :data:`REPORTED_DROPS` wait (the
wire's bound on id lists); beyond that the oldest go unreported and the orchestrator's
horizon settles them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from node_agent.statefile import write_state
from testbed_common.wire import Assignment

log = logging.getLogger(__name__)

#: How many started/finished run ids are remembered to refuse re-sent assignments.
REMEMBERED_RUNS = 1000
#: How many dropped, not yet acknowledged run ids are kept (``wire.Heartbeat``'s bound).
REPORTED_DROPS = 1000
#: A run is started only while at least this share of its slot is ahead. A slot is the
#: run's forecast duration (its own time and a fixed allowance for the container's
#: start and end, 15 s for a TAT), so a run that can start only in its last third would
#: be stopped at its deadline with its traffic spent and no result: it is reported
#: missed instead, before a byte moves, and a campaign books its session again. A
#: third keeps every case where the run might still fit (a 10 s TAT needs about 12 s of
#: its 25 s slot) and catches those where it cannot (a node busy, slow or out of
#: contact through most of the slot).
MIN_SLOT_LEFT = 1 / 3


def _slot_s(a: Assignment, now: datetime) -> tuple[float, float]:
    """``a``'s slot length and the seconds from ``now`` to its deadline."""
    return (a.deadline - a.not_before).total_seconds(), (a.deadline - now).total_seconds()


def slot_left(a: Assignment, now: datetime) -> float:
    """The share of ``a``'s slot still ahead at ``now``: 1 until it begins, 0 from its
    deadline (a slot of no length is all ahead until its deadline)."""
    length, ahead = _slot_s(a, now)
    if ahead <= 0:
        return 0.0
    return 1.0 if length <= 0 else min(1.0, ahead / length)


def missed_reason(a: Assignment, now: datetime) -> str:
    """Why the node reports ``a`` missed at ``now`` (its state is ``expired``)."""
    if now >= a.deadline:
        return (f"missed: the node could not start the run before its deadline "
                f"({a.deadline.isoformat()})")
    length, ahead = _slot_s(a, now)
    return (f"missed: the node could start the run only {ahead:.0f} s before its deadline "
            f"({a.deadline.isoformat()}), with less than {MIN_SLOT_LEFT:.0%} of its "
            f"{length:.0f} s slot left; it was not started, as it would have been "
            f"stopped at the deadline with its traffic spent")


class AssignmentBook:
    def __init__(
        self, pending: Iterable[Assignment] = (), seen: Iterable[str] = (),
        dropped: Iterable[str] = (),
    ) -> None:
        self._pending: dict[str, Assignment] = {a.run_id: a for a in pending}
        self._seen: list[str] = list(seen)[-REMEMBERED_RUNS:]
        self._dropped: list[str] = list(dict.fromkeys(dropped))[-REPORTED_DROPS:]

    def offer(self, assignments: Iterable[Assignment]) -> list[Assignment]:
        """Add assignments not yet known; returns the ones that are new."""
        added = []
        for a in assignments:
            if a.run_id in self._pending or a.run_id in self._seen:
                continue
            self._pending[a.run_id] = a
            added.append(a)
        return added

    def cancel(self, run_id: str) -> Assignment | None:
        """Drop a pending run; returns it if it was pending (then it is reported as
        dropped unstarted until acknowledged)."""
        a = self._pending.pop(run_id, None)
        if a is not None:
            self._remember(run_id)
            self._dropped.append(run_id)
            del self._dropped[:-REPORTED_DROPS]
        return a

    @property
    def dropped_ids(self) -> list[str]:
        """Runs dropped unstarted on a cancel, oldest first, not yet acknowledged."""
        return list(self._dropped)

    def acknowledge_dropped(self, run_ids: Iterable[str]) -> None:
        """Forget dropped runs a heartbeat delivered (its reply came back)."""
        done = set(run_ids)
        self._dropped = [r for r in self._dropped if r not in done]

    def take(self, run_id: str) -> Assignment:
        """Mark a pending run as started (it leaves the book and is remembered)."""
        a = self._pending.pop(run_id)
        self._remember(run_id)
        return a

    def next_due(self, now: datetime) -> Assignment | None:
        """The earliest run whose slot has begun, if any."""
        due = [a for a in self._pending.values() if a.not_before <= now]
        return min(due, key=lambda a: (a.not_before, a.run_id)) if due else None

    def seconds_until_next(self, now: datetime) -> float | None:
        if not self._pending:
            return None
        first = min(a.not_before for a in self._pending.values())
        return max(0.0, (first - now).total_seconds())

    def missed(self, now: datetime) -> list[Assignment]:
        """Pending runs the node can no longer run in their slot: the deadline passed, or
        less than :data:`MIN_SLOT_LEFT` of the slot is left (:func:`missed_reason`)."""
        return [a for a in self._pending.values() if slot_left(a, now) < MIN_SLOT_LEFT]

    @property
    def pending_ids(self) -> list[str]:
        return sorted(self._pending)

    def knows(self, run_id: str) -> bool:
        return run_id in self._pending or run_id in self._seen

    def to_json(self) -> dict[str, Any]:
        return {
            "pending": [a.model_dump(mode="json") for a in self._pending.values()],
            "seen": self._seen,
            "dropped": self._dropped,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AssignmentBook:
        return cls(
            pending=(Assignment.model_validate(a) for a in data.get("pending", [])),
            seen=(str(s) for s in data.get("seen", [])),
            dropped=(str(d) for d in data.get("dropped", [])),
        )

    def _remember(self, run_id: str) -> None:
        self._seen.append(run_id)
        del self._seen[:-REMEMBERED_RUNS]


def save_book(book: AssignmentBook, path: Path) -> None:
    """Keep the book on disk (:func:`node_agent.statefile.write_state`: atomic; a full
    disk keeps the old book there, logged, while the book in memory goes on)."""
    write_state(path, book.to_json(), what="assignment book", indent=1)


def load_book(path: Path) -> AssignmentBook:
    if not path.exists():
        return AssignmentBook()
    return AssignmentBook.from_json(json.loads(path.read_text()))
