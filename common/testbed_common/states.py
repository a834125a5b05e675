"""Run lifecycle states and the transitions between them.

A run moves scheduled -> assigned -> deploying -> running -> uploading -> done, or ends
early as failed, cancelled or expired. A run whose node falls silent while deploying or
running it, or while holding it assigned when it falls due, becomes ``unreachable``: not
final, because the node goes on measuring offline from the schedule it holds and uploads
when back (MONROE lost results that way). From there the node's own reports and its
bundle move it on (``expired`` when the node says it missed the run's slot); only a long
silence (a horizon of days) fails it.
Final states are never overwritten (a lesson from
MONROE, where a late status report could resurrect a killed experiment), so the
orchestrator checks every transition against ``ALLOWED`` before it writes it. One
exception, and only through a verified bundle: ``cancelled -> done``, for a run its
node had been handed and ran offline before it could learn of the cancellation (its
results are real and are kept; the run's events say it ran after the cancellation).
"""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    SCHEDULED = "scheduled"
    ASSIGNED = "assigned"
    DEPLOYING = "deploying"
    RUNNING = "running"
    UPLOADING = "uploading"
    #: The node fell silent while holding the run; its reservation is kept, its bundle
    #: still awaited.
    UNREACHABLE = "unreachable"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"

    @property
    def final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset({RunState.DONE, RunState.FAILED, RunState.CANCELLED, RunState.EXPIRED})

#: Forward moves a run may make. Skipping ahead is allowed (an agent that finds a run's
#: container already gone reports failed straight from assigned), going back is not.
ALLOWED: dict[RunState, frozenset[RunState]] = {
    RunState.SCHEDULED: frozenset(
        {RunState.ASSIGNED, RunState.CANCELLED, RunState.EXPIRED, RunState.FAILED}
    ),
    RunState.ASSIGNED: frozenset(
        {
            RunState.DEPLOYING,
            RunState.RUNNING,
            RunState.FAILED,
            RunState.CANCELLED,
            RunState.EXPIRED,
            # Its node was out of contact when it fell due: it may run it offline.
            RunState.UNREACHABLE,
        }
    ),
    RunState.DEPLOYING: frozenset(
        {RunState.RUNNING, RunState.UNREACHABLE, RunState.FAILED, RunState.CANCELLED}
    ),
    RunState.RUNNING: frozenset(
        {RunState.UPLOADING, RunState.UNREACHABLE, RunState.FAILED, RunState.CANCELLED}
    ),
    # Back in contact, the node says where the run is: still running, finished
    # (uploading), or failed; its bundle may also arrive first (uploading, then done).
    # (``deploying`` too: a retried report of a deploy that began before the silence, or
    # an assigned run the node starts offline; ``expired``: the node says it missed the
    # run's slot.)
    RunState.UNREACHABLE: frozenset(
        {RunState.DEPLOYING, RunState.RUNNING, RunState.UPLOADING, RunState.FAILED,
         RunState.CANCELLED, RunState.EXPIRED}
    ),
    RunState.UPLOADING: frozenset({RunState.DONE, RunState.FAILED}),
    RunState.DONE: frozenset(),
    RunState.FAILED: frozenset(),
    # Only through the bundle of a run its node ran offline before it learned of the
    # cancellation (services.uploads); no report can do it (a report never says done).
    RunState.CANCELLED: frozenset({RunState.DONE}),
    RunState.EXPIRED: frozenset(),
}


def can_move(current: RunState, target: RunState) -> bool:
    """True when a run in ``current`` may be moved to ``target``."""
    return target in ALLOWED[current]


class NodeHealth(StrEnum):
    """Node health as users see it; derived from the last heartbeat, never stored."""

    NEW = "new"  # provisioned, has never registered
    ONLINE = "online"
    STALE = "stale"  # missed a few heartbeats; keeps its bookings
    OFFLINE = "offline"  # silent too long: its active runs become unreachable
    MAINTENANCE = "maintenance"  # taken out of service by an operator
