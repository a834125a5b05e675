"""Out of contact is not failure: the lifecycle moves, the reaper's decision and the
words for a silence (pure rules of ``testbed_common.states`` and ``model.contact``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.model.contact import (
    Horizon,
    Silence,
    Slot,
    cancel_holds_reservation,
    end_overdue,
    held_cancel_expired,
    horizon_reason,
    on_silence,
    out_of_contact_note,
    releases_dropped,
    took_up_for_settlement,
)
from testbed_common.states import RunState, can_move

S = RunState
NOW = datetime(2026, 1, 1, tzinfo=UTC)
WEEK = Horizon(7 * 86400.0)


def test_a_silent_run_is_not_final_and_the_node_back_in_contact_moves_it_on() -> None:
    assert not S.UNREACHABLE.final
    for held in (S.DEPLOYING, S.RUNNING):
        assert can_move(held, S.UNREACHABLE)
    for word in (S.DEPLOYING, S.RUNNING, S.UPLOADING, S.FAILED, S.CANCELLED, S.EXPIRED):
        assert can_move(S.UNREACHABLE, word)
    # an assigned run that falls due while its node is offline is kept too
    assert can_move(S.ASSIGNED, S.UNREACHABLE)
    # a run becomes done only through uploading (its bundle), never straight away
    assert not can_move(S.UNREACHABLE, S.DONE)
    # a finished run already settled waits for its bundle as it is
    assert not can_move(S.UPLOADING, S.UNREACHABLE)
    for final in (S.DONE, S.FAILED, S.CANCELLED, S.EXPIRED):
        assert not can_move(final, S.UNREACHABLE)
    assert not can_move(S.SCHEDULED, S.UNREACHABLE)  # never handed out: the node lacks it


@pytest.mark.parametrize(("state", "offline", "expected"), [
    (S.RUNNING, False, Silence.KEEP),
    (S.RUNNING, True, Silence.UNREACHABLE),
    (S.DEPLOYING, True, Silence.UNREACHABLE),
    (S.ASSIGNED, True, Silence.UNREACHABLE),  # held by the node: may run offline
    (S.ASSIGNED, False, Silence.KEEP),
])
def test_an_offline_node_makes_runs_it_took_up_unreachable(
        state: RunState, offline: bool, expected: Silence) -> None:
    assert on_silence(state, node_offline=offline, silent_since=None, now=NOW,
                      horizon=WEEK) == expected


SLOT = Slot(NOW + timedelta(minutes=10), NOW + timedelta(minutes=11), grace_s=60)


@pytest.mark.parametrize(("state", "now", "offline", "last_heard", "expected"), [
    # assigned, its node offline: waits until it falls due, then is unreachable
    (S.ASSIGNED, NOW, True, NOW - timedelta(hours=1), Silence.KEEP),
    (S.ASSIGNED, SLOT.not_before, True, NOW - timedelta(hours=1), Silence.UNREACHABLE),
    # not yet offline, but silent since before the deadline, and the slot's grace is
    # over: out of contact (the deadline rule is for nodes that are heard from)
    (S.ASSIGNED, SLOT.deadline + timedelta(seconds=61), False, SLOT.not_before,
     Silence.UNREACHABLE),
    (S.RUNNING, SLOT.deadline + timedelta(seconds=61), False, SLOT.not_before,
     Silence.UNREACHABLE),
    # grace not over yet: nothing to say
    (S.ASSIGNED, SLOT.deadline + timedelta(seconds=59), False, SLOT.not_before, Silence.KEEP),
    # heard from after the deadline: not a silence (the reaper's deadline rule applies)
    (S.ASSIGNED, SLOT.deadline + timedelta(seconds=61), False,
     SLOT.deadline + timedelta(seconds=1), Silence.KEEP),
])
def test_an_assigned_run_is_kept_through_a_silence_once_it_falls_due(
        state: RunState, now: datetime, offline: bool, last_heard: datetime,
        expected: Silence) -> None:
    assert on_silence(state, node_offline=offline, silent_since=None, now=now, horizon=WEEK,
                      slot=SLOT, last_heard=last_heard) == expected


@pytest.mark.parametrize(("history", "target", "by_node", "started"), [
    # it ran before the silence: started, whoever ends it
    ({S.ASSIGNED, S.RUNNING, S.UNREACHABLE}, S.FAILED, False, True),
    ({S.ASSIGNED, S.DEPLOYING, S.UNREACHABLE}, S.CANCELLED, False, True),
    # unreachable since it fell due: the node says it missed or refused it: nothing ran
    ({S.ASSIGNED, S.UNREACHABLE}, S.EXPIRED, True, False),
    ({S.ASSIGNED, S.UNREACHABLE}, S.FAILED, True, False),
    # cancelled meanwhile: released (a bundle after all settles it again)
    ({S.ASSIGNED, S.UNREACHABLE}, S.CANCELLED, False, False),
    # the horizon: it may have run unseen; the safe side charges it
    ({S.ASSIGNED, S.UNREACHABLE}, S.FAILED, False, True),
])
def test_what_an_unreachable_runs_settlement_counts_as_started(
        history: set[RunState], target: RunState, by_node: bool, started: bool) -> None:
    assert took_up_for_settlement(S.UNREACHABLE, history=frozenset(history), target=target,
                                  by_node=by_node) is started
    assert took_up_for_settlement(S.RUNNING, history=frozenset(history), target=target,
                                  by_node=by_node) is None  # the usual rule


@pytest.mark.parametrize(("silent_for", "expected"), [
    (timedelta(days=7) - timedelta(seconds=1), Silence.KEEP),
    (timedelta(days=7), Silence.FAIL),
])
def test_an_unreachable_run_fails_only_at_the_horizon(silent_for: timedelta,
                                                      expected: Silence) -> None:
    for offline in (True, False):
        assert on_silence(S.UNREACHABLE, node_offline=offline, silent_since=NOW - silent_for,
                          now=NOW, horizon=WEEK) == expected


def test_the_notes_name_the_node_and_the_silence() -> None:
    assert out_of_contact_note("se-02", 100.0) == (
        "node se-02 out of contact for 1 min 40 s during the run")
    assert out_of_contact_note("se-02", None) is None
    assert horizon_reason("se-02", silent_since=NOW, horizon=WEEK).startswith(
        "no word from node se-02 for 7 days since 2026-01-01T00:00:00+00:00")


def test_cli_and_campaigns_page_know_the_state() -> None:
    import click

    from orchestrator.cli.runs import run_list
    from orchestrator.pages.campaigns import _runs

    option = next(p for p in run_list.params if p.name == "state")
    assert isinstance(option.type, click.Choice)
    assert "unreachable" in option.type.choices  # `testbed run list --state unreachable`
    # counted in life-cycle order, after uploading and before the final states
    assert _runs({"done": 2, "unreachable": 1, "running": 3}) == (
        "3 running, 1 unreachable, 2 done")


@pytest.mark.parametrize(("state", "history", "held"), [
    (S.SCHEDULED, {S.SCHEDULED}, False),  # never handed out: cannot run
    (S.ASSIGNED, {S.SCHEDULED, S.ASSIGNED}, True),  # in the node's book
    (S.UNREACHABLE, {S.SCHEDULED, S.ASSIGNED}, True),  # fell due while away
    (S.UNREACHABLE, {S.ASSIGNED, S.DEPLOYING}, False),  # started: settled as started
    (S.UNREACHABLE, {S.ASSIGNED, S.RUNNING}, False),
    (S.RUNNING, {S.ASSIGNED, S.DEPLOYING, S.RUNNING}, False),
])
def test_a_cancel_holds_the_reservation_of_a_run_its_node_may_still_start(
        state: RunState, history: set[RunState], held: bool) -> None:
    assert cancel_holds_reservation(state, frozenset(history)) is held


def test_only_the_nodes_own_unsettled_cancelled_runs_are_released_on_its_word() -> None:
    ok = {"run_node": "se-01", "node_id": "se-01", "state": S.CANCELLED, "settled": False}
    assert releases_dropped(**ok)  # type: ignore[arg-type]
    for change in ({"node_id": "se-02"}, {"state": S.ASSIGNED}, {"state": S.DONE},
                   {"settled": True}):
        assert not releases_dropped(**{**ok, **change})  # type: ignore[arg-type]


def test_a_held_cancel_is_settled_at_the_horizon_from_the_cancellation() -> None:
    assert not held_cancel_expired(cancelled_at=NOW - timedelta(days=7) + timedelta(seconds=1),
                                   now=NOW, horizon=WEEK)
    assert held_cancel_expired(cancelled_at=NOW - timedelta(days=7), now=NOW, horizon=WEEK)


def test_a_run_back_from_out_of_contact_gets_its_grace_from_its_last_report() -> None:
    deadline = NOW
    late = NOW + timedelta(minutes=10)  # long past the deadline and its 30 s grace
    assert end_overdue(deadline=deadline, grace_s=30, now=late, serving_since=NOW,
                       back_at=None)
    # the node came back and replayed "deploying" 5 s ago: not overdue yet...
    back = late - timedelta(seconds=5)
    assert not end_overdue(deadline=deadline, grace_s=30, now=late, serving_since=NOW,
                           back_at=back)
    # ...until a grace passes with no further word
    assert end_overdue(deadline=deadline, grace_s=30, now=back + timedelta(seconds=31),
                       serving_since=NOW, back_at=back)
    # and an orchestrator that just started gives every run its grace
    assert not end_overdue(deadline=deadline, grace_s=30, now=late, serving_since=late,
                           back_at=None)
