"""Out of contact is not failure: what a silent node means for the runs it holds.

Mobile nodes (buses, trains, rural sites) lose their control link for minutes to hours.
The agent holds its schedule for a day (the hand-out horizon), goes on measuring offline
and spools the bundles, so a run whose node falls silent while holding it (running it,
or holding it assigned when it falls due) is ``unreachable``, not failed: its
reservation stays held, its bundle is still awaited. Only a silence longer than a
horizon (days) fails it. These are the decisions and the words for them; the reaper,
the upload service and the settlement apply them. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from orchestrator.model.durations import spoken
from testbed_common.states import RunState

#: Runs that go ``unreachable`` when their node falls silent: the node took them up
#: and may finish them offline. An assigned run joins them once it falls due (the node
#: holds it in its book and may run it offline); before that it simply waits.
KEPT_THROUGH_SILENCE = frozenset({RunState.DEPLOYING, RunState.RUNNING})
#: States that show the node took a run up (its reports arrive in order, so a run it
#: started offline passes through one of them before any end it reports).
TOOK_UP = frozenset({RunState.DEPLOYING, RunState.RUNNING, RunState.UPLOADING})


class Silence(StrEnum):
    """What the reaper does with an active run of a node, given the node's silence."""

    KEEP = "keep"  # the node is heard from, or the run waits as unreachable
    UNREACHABLE = "unreachable"  # the node just fell silent: keep the run, mark it
    FAIL = "fail"  # silent while holding a run it had not taken up, or past the horizon


@dataclass(frozen=True)
class Horizon:
    """How long an unreachable run waits for word from its node."""

    seconds: float

    def passed(self, *, silent_since: datetime, now: datetime) -> bool:
        return now - silent_since >= timedelta(seconds=self.seconds)


@dataclass(frozen=True)
class Slot:
    """A run's booked slot and the grace after it for its node to report an end."""

    not_before: datetime
    deadline: datetime
    grace_s: float

    def due(self, now: datetime) -> bool:
        return self.not_before <= now

    def over(self, now: datetime) -> bool:
        return now > self.deadline + timedelta(seconds=self.grace_s)


def end_overdue(*, deadline: datetime, grace_s: float, now: datetime, serving_since: datetime,
                back_at: datetime | None) -> bool:
    """Whether a run its node is heard from has failed to report an end in time: past
    its deadline plus the grace, counted from the orchestrator's start at the earliest
    (``serving_since``: no node can report to an orchestrator that is down). A run back
    from out of contact (``back_at``: its last report, the node replaying what it did
    offline, e.g. ``deploying`` long after the deadline) gets the grace from that
    report, not from the deadline, or it would fail between two replayed reports."""
    since = max(deadline, serving_since, back_at or deadline)
    return now > since + timedelta(seconds=grace_s)


def on_silence(state: RunState, *, node_offline: bool, silent_since: datetime | None,
               now: datetime, horizon: Horizon, slot: Slot | None = None,
               last_heard: datetime | None = None) -> Silence:
    """The reaper's decision for one run of a node (see the module docstring).

    A node is out of contact for a run when it is offline, or when the run's slot and
    grace are over and the node has not been heard since the run's deadline (silent
    since before the run should have ended, though not yet long enough to be offline:
    the deadline rule, which fails runs of nodes that are heard from, is not for it).
    """
    if state == RunState.UNREACHABLE:
        if silent_since is not None and horizon.passed(silent_since=silent_since, now=now):
            return Silence.FAIL
        return Silence.KEEP
    silent_through = (slot is not None and slot.over(now)
                      and (last_heard is None or last_heard < slot.deadline))
    if not (node_offline or silent_through):
        return Silence.KEEP
    if state in KEPT_THROUGH_SILENCE:
        return Silence.UNREACHABLE
    if state == RunState.ASSIGNED:
        return Silence.UNREACHABLE if slot is None or slot.due(now) else Silence.KEEP
    return Silence.FAIL


def took_up_for_settlement(state: RunState, *, history: frozenset[RunState], target: RunState,
                           by_node: bool) -> bool | None:
    """Whether the settlement counts an ``unreachable`` run as started, or None when
    ``state`` is not ``unreachable`` (the usual rule applies).

    An unreachable run whose history shows its node took it up started. One handed out
    and unreachable since it fell due did not, as far as anyone knows: ended by its
    node's word (missed its slot, refused it), it is charged nothing; ended by the
    horizon, it may have run unseen, and the safe side charges it all. (A cancel does
    not settle it: :func:`cancel_holds_reservation`.)
    """
    if state != RunState.UNREACHABLE:
        return None
    if TOOK_UP & history:
        return True
    return target == RunState.FAILED and not by_node


def cancel_holds_reservation(state: RunState, history: frozenset[RunState]) -> bool:
    """Whether cancelling a run in ``state`` leaves its reservation held (unsettled).

    A run handed to its node (``assigned``, or ``unreachable`` since it fell due without
    a start in its ``history``) sits in the node's book; a node out of contact may run it
    offline before it learns of the cancellation, and its bundle is then taken and
    charged at what it measured. Released at the cancel, its bytes could be booked again
    meanwhile and the SIM overrun; so they stay held until the node says it dropped the
    run unstarted (:func:`releases_dropped`), its bundle arrives, or the horizon passes
    (:func:`held_cancel_expired`). A run never handed out cannot run: released at once.
    """
    if state == RunState.ASSIGNED:
        return True
    return state == RunState.UNREACHABLE and not TOOK_UP & history


def releases_dropped(*, run_node: str, node_id: str, state: RunState, settled: bool) -> bool:
    """Whether a node's word that it dropped a run unstarted releases the run's held
    reservation: only for the node's own runs, cancelled and not yet settled (the list
    is the node's input; anything else in it changes nothing)."""
    return run_node == node_id and state == RunState.CANCELLED and not settled


def held_cancel_expired(*, cancelled_at: datetime, now: datetime, horizon: Horizon) -> bool:
    """Whether a cancelled run whose reservation is held waited the horizon for its
    node's word: then it is settled as started and unmeasured (it may have run unseen),
    as an unreachable run is at the horizon."""
    return horizon.passed(silent_since=cancelled_at, now=now)


def held_cancel_note(node_id: str) -> str:
    return (f"its reservation stays held until node {node_id} confirms it dropped the run "
            "unstarted (or its bundle arrives): the node may run it offline before it "
            "learns of the cancellation")


def dropped_note(node_id: str) -> str:
    return (f"node {node_id} confirmed it dropped the run unstarted after the cancellation: "
            "the reservation is released (charged 0 bytes)")


def held_cancel_horizon_reason(node_id: str, *, cancelled_at: datetime,
                               horizon: Horizon) -> str:
    return (f"no word from node {node_id} about the cancelled run for "
            f"{spoken(horizon.seconds)} since the cancellation at "
            f"{cancelled_at.isoformat()}: it may have run unseen; the whole reservation "
            "is charged")


def unreachable_reason(node_id: str, *, last_heard: str, horizon: Horizon) -> str:
    return (f"node {node_id} fell silent while holding the run (last heartbeat {last_heard}); "
            "the run is kept: the node may finish it offline and upload its bundle when back; "
            f"it fails after {spoken(horizon.seconds)} without word")


def due_unreachable_reason(node_id: str, *, last_heard: str, horizon: Horizon) -> str:
    return (f"node {node_id} was out of contact when the run fell due (last heartbeat "
            f"{last_heard}); the run is kept: the node holds it and may run it offline, "
            "uploading its bundle when back; it fails after "
            f"{spoken(horizon.seconds)} without word")


def ran_after_cancel_note(node_id: str, *, ran_at: str | None, cancelled_at: str) -> str:
    """The reason a cancelled run becomes done: its node ran it offline, not knowing."""
    when = f"at {ran_at}" if ran_at else "while out of contact"
    return (f"ran offline {when} on node {node_id}, after the cancellation at "
            f"{cancelled_at} (the node learned of it only when back); its results are kept")


def horizon_reason(node_id: str, *, silent_since: datetime, horizon: Horizon) -> str:
    return (f"no word from node {node_id} for {spoken(horizon.seconds)} since "
            f"{silent_since.isoformat()}; the whole reservation stays charged")


def out_of_contact_note(node_id: str, seconds: float | None) -> str | None:
    """The note a run carries when its node was out of contact during it, else None."""
    if not seconds:
        return None
    return f"node {node_id} out of contact for {spoken(seconds)} during the run"
