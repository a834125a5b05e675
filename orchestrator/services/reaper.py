"""Ends runs that can no longer end by themselves, each with a stated reason.

- a run whose node went offline while deploying or running it, or while holding it
  assigned when it falls due, becomes ``unreachable`` (not final: the node may run or
  finish it offline from the schedule it holds, and upload when back; its reservation
  stays held), and fails only after ``unreachable_horizon_s`` without word
  (``model.contact``); an assigned run not yet due waits; an uploading run waits: its
  bundle is in the node's spool;
- a run still active past its deadline plus a grace (for a run back from out of
  contact, a grace after its last report), its node heard from since the
  deadline, fails (a node silent since then is out of contact: the rule above);
- a scheduled run never picked up expires;
- a cancelled run whose reservation is held for its node's word (it may have run it
  offline, not knowing) is settled as started and unmeasured after the same horizon;
- a run waiting for its bundle longer than ``upload_wait_s`` fails;
- and, not a run but its bytes: an unfinished upload idle for ``part_idle_expire_s``
  is dropped (``services.partials``), so abandoned parts do not fill the disk.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Select, or_, select

from orchestrator.model.contact import (
    Horizon,
    Silence,
    Slot,
    due_unreachable_reason,
    end_overdue,
    held_cancel_expired,
    held_cancel_horizon_reason,
    horizon_reason,
    on_silence,
    unreachable_reason,
)
from orchestrator.model.health import node_health
from orchestrator.services import quotas
from orchestrator.services.context import Context
from orchestrator.services.nodes import ACTIVE_ON_NODE
from orchestrator.services.partials import expire_idle_parts
from orchestrator.services.runs import transition
from orchestrator.store.tables import Node, Run, RunEvent
from testbed_common.states import NodeHealth, RunState


def node_silent(ctx: Context, node: Node, now: datetime) -> NodeHealth:
    """Health as the reaper judges it: silence counted from the orchestrator's start at
    the earliest, since a node cannot heartbeat to an orchestrator that is down."""
    last = node.last_heartbeat_at
    effective = max(last, ctx.started_at) if last is not None else None
    return node_health(
        now=now,
        last_heartbeat=effective,
        maintenance=node.maintenance,
        interval_s=ctx.settings.health.heartbeat_interval_s,
        stale_after_beats=ctx.settings.health.stale_after_beats,
        offline_after_beats=ctx.settings.health.offline_after_beats,
    )


def held_runs_to_judge(ctx: Context, now: datetime) -> Select[Any]:
    """The runs nodes hold that the pass below may move: every ``unreachable`` one, and
    of the others those whose slot is over or whose node has been silent for the offline
    threshold. The rest (at 10,000 nodes, the 240,000 runs of the hand-out horizon,
    handed out and not yet due) would all be judged "keep" by :func:`on_silence` and
    :func:`end_overdue`: reading them every pass cost seconds of CPU every 5 s. A
    superset by construction (a node judged offline has been silent at least the
    threshold since its last heartbeat; a slot over, or an end overdue, has its deadline
    passed); the pure rules still decide each run read."""
    health = ctx.settings.health
    offline_since = now - timedelta(
        seconds=health.heartbeat_interval_s * health.offline_after_beats)
    silent_nodes = select(Node.id).where(Node.last_heartbeat_at <= offline_since)
    return select(Run).where(
        Run.state.in_((*ACTIVE_ON_NODE, RunState.UNREACHABLE)),
        or_(Run.state == RunState.UNREACHABLE, Run.deadline < now,
            Run.node_id.in_(silent_nodes)))


def reap(ctx: Context) -> int:
    """One pass; returns how many runs it moved (ended, or made unreachable)."""
    now = ctx.clock.now()
    health = ctx.settings.health
    expire = timedelta(seconds=ctx.settings.scheduling.expire_after_s)
    ended = kept = 0
    horizon = Horizon(health.unreachable_horizon_s)
    with ctx.db.session() as s:
        for run in s.scalars(held_runs_to_judge(ctx, now)).all():
            node = s.get(Node, run.node_id)
            assert node is not None
            heard = (max(node.last_heartbeat_at, ctx.started_at)
                     if node.last_heartbeat_at is not None else None)
            verdict = on_silence(RunState(run.state),
                                 node_offline=node_silent(ctx, node, now) == NodeHealth.OFFLINE,
                                 silent_since=run.silent_since, now=now, horizon=horizon,
                                 slot=Slot(run.not_before, run.deadline,
                                           health.deadline_grace_s),
                                 last_heard=heard)
            last = node.last_heartbeat_at.isoformat() if node.last_heartbeat_at else "never"
            if verdict == Silence.UNREACHABLE:
                run.silent_since = max(node.last_heartbeat_at or now, ctx.started_at)
                words = (due_unreachable_reason if run.state == RunState.ASSIGNED
                         else unreachable_reason)
                transition(s, run, RunState.UNREACHABLE,
                           words(node.id, last_heard=last, horizon=horizon),
                           source="orchestrator", at=now)
                kept += 1
            elif verdict == Silence.FAIL:  # an unreachable run past the horizon
                assert run.silent_since is not None  # the horizon is counted from it
                reason = horizon_reason(node.id, silent_since=run.silent_since,
                                        horizon=horizon)
                transition(s, run, RunState.FAILED, reason, source="orchestrator", at=now)
                ended += 1
            elif (RunState(run.state) != RunState.UNREACHABLE
                  and end_overdue(deadline=run.deadline, grace_s=health.deadline_grace_s,
                                  now=now, serving_since=ctx.started_at,
                                  back_at=(run.state_at if run.out_of_contact_s is not None
                                           else None))):
                transition(
                    s,
                    run,
                    RunState.FAILED,
                    f"no end reported by the deadline ({run.deadline.isoformat()}) plus "
                    f"{health.deadline_grace_s:.0f} s grace",
                    source="orchestrator",
                    at=now,
                )
                ended += 1
        overdue = s.scalars(
            select(Run).where(Run.state == RunState.SCHEDULED, Run.not_before < now - expire)
        ).all()
        for run in overdue:
            transition(
                s,
                run,
                RunState.EXPIRED,
                f"node {run.node_id} did not pick the run up within "
                f"{expire.total_seconds():.0f} s of its slot",
                source="orchestrator",
                at=now,
            )
            ended += 1
        # A cancelled run its node may still have run: its reservation is held for the
        # node's word (model.contact.cancel_holds_reservation), for the horizon at most.
        for run in s.scalars(select(Run).where(Run.state == RunState.CANCELLED,
                                               Run.settled_at.is_(None),
                                               Run.reserved_bytes.is_not(None))).all():
            if not held_cancel_expired(cancelled_at=run.state_at, now=now, horizon=horizon):
                continue
            quotas.settle(s, run, at=now, started=True)
            s.add(RunEvent(run_id=run.id, state=run.state, source="orchestrator", at=now,
                           reason=held_cancel_horizon_reason(
                               run.node_id, cancelled_at=run.state_at, horizon=horizon)))
        wait = timedelta(seconds=health.upload_wait_s)
        stuck = s.scalars(
            select(Run).where(Run.state == RunState.UPLOADING, Run.state_at < now - wait)
        ).all()
        for run in stuck:
            transition(
                s,
                run,
                RunState.FAILED,
                f"bundle never arrived within {wait.total_seconds() / 86400:.1f} days of the "
                "run's end",
                source="orchestrator",
                at=now,
            )
            ended += 1
    if ended:
        ctx.replan_wanted.set()  # failed and expired sessions may be booked again
    expire_idle_parts(ctx)
    return ended + kept
