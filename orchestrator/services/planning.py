"""The campaign planner against the database: a snapshot in, runs and decisions out.

``orchestrator.scheduling.planner.plan`` is pure; this module builds its
:class:`Snapshot` from the state database (nodes and their SIMs, node health, every
held run, each campaign's past sessions, the quota ledger, measured link rates, the
catalogue), writes the plan's bookings as ``Run`` rows (one per interface, each with
its session key and quota reservation; :mod:`orchestrator.services.bookings` streams
them in batches) and stores each campaign's decisions.

Held runs are fixed: a re-plan only adds bookings around them, so it is safe to run at
any time (on a timer, after a run fails, a node changes health or a quota changes).
One pass at a time, in a process and across replicas sharing a PostgreSQL database
(``Context.planning``: a thread lock and an advisory lock).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.catalogue.manifest import Manifest, proxy_modes
from orchestrator.errors import Invalid
from orchestrator.model.fleet import HEALTH_ORDER
from orchestrator.model.ids import CampaignId, NodeId
from orchestrator.scheduling.planner import (
    CalendarEntry,
    Decision,
    DecisionKind,
    EntryStatus,
    ReasonCode,
    SessionKey,
    Snapshot,
    plan,
)
from orchestrator.scheduling.planner import (
    Campaign as PlanCampaign,
)
from orchestrator.scheduling.selection import NodeFacts, SimFacts
from orchestrator.scheduling.spec import CampaignSpecV2, parse_campaign
from orchestrator.schemas import PlanPublic
from orchestrator.services import quotas
from orchestrator.services.bookings import write_bookings
from orchestrator.services.context import Context
from orchestrator.services.history import link_history, rate_policy
from orchestrator.services.planhooks import proxy_verdicts
from orchestrator.services.runs import BOOKED
from orchestrator.services.views import HealthFacts, NodeHealthRow, health_of
from orchestrator.store.health import health_rank_sql
from orchestrator.store.tables import Campaign, Node, Run
from testbed_common.states import NodeHealth, RunState

log = logging.getLogger(__name__)

#: A session with a run in one of these states is not booked again.
FINISHED = (RunState.UPLOADING, RunState.DONE, RunState.CANCELLED)
#: Runs in these states free their session to be booked again (while attempts last).
RETRIED = (RunState.FAILED, RunState.EXPIRED)


def parse_spec(raw: Any, catalogue: Mapping[str, Manifest]) -> CampaignSpecV2:
    """A campaign document of either version, or :class:`Invalid` saying what is wrong
    (selection errors show the position with a caret; recurrence errors say why).
    Proxy mode is checked against the ``catalogue``'s manifests."""
    if not isinstance(raw, dict):
        raise Invalid("campaign spec must be a mapping (YAML or JSON object)")
    try:
        return parse_campaign(raw, proxy_modes=proxy_modes(catalogue))
    except ValidationError as e:
        fields = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or '(top)'}: {err['msg']}" for err in e.errors()
        )
        raise Invalid(f"campaign spec: {fields}") from e


def session_key(run: Run) -> SessionKey | None:
    if run.campaign_id is None or run.session_occurrence is None:
        return None
    ifaces = tuple((run.session_interfaces or run.interface).split(","))
    return SessionKey(CampaignId(run.campaign_id), run.session_occurrence,
                      NodeId(run.node_id), ifaces)


def unavailable_nodes(ctx: Context, nodes: Sequence[HealthFacts],
                      now: datetime) -> dict[NodeId, str]:
    out: dict[NodeId, str] = {}
    for n in nodes:
        health = health_of(n, now, ctx.settings.health)
        if health == NodeHealth.MAINTENANCE:
            out[NodeId(n.id)] = "in maintenance"
        elif health == NodeHealth.OFFLINE:
            last = n.last_heartbeat_at.isoformat() if n.last_heartbeat_at else "never"
            out[NodeId(n.id)] = f"offline, last heartbeat {last}"
        elif health == NodeHealth.NEW:
            out[NodeId(n.id)] = "its agent has never registered"
    return out


def availability(ctx: Context) -> frozenset[tuple[str, str]]:
    """Which nodes may not be booked now, and why: the planner loop re-plans when this
    changes (a node went offline or came back)."""
    now = ctx.clock.now()
    rank = health_rank_sql(now, ctx.settings.health)
    with ctx.db.reading() as s:
        # Only the nodes the database judges unbookable, in the three columns health
        # needs: every node's row, every tick, was 10,000 rows read into the leader's
        # process (36-40 ms of its CPU every 5 s at 10,000 nodes), beside its heartbeats.
        rows = [NodeHealthRow(*r) for r in s.execute(
            select(Node.id, Node.last_heartbeat_at, Node.maintenance)
            .where(rank.in_(_UNBOOKABLE)))]
    return frozenset(unavailable_nodes(ctx, rows, now).items())


#: The health of nodes the planner may not book (:func:`unavailable_nodes`), as
#: places in HEALTH_ORDER (the database's judgement, ``store.health``).
_UNBOOKABLE = tuple(HEALTH_ORDER.index(h.value) for h in
                    (NodeHealth.OFFLINE, NodeHealth.NEW, NodeHealth.MAINTENANCE))


def _calendar(ctx: Context, s: Session, campaign_ids: Sequence[str], *, now: datetime,
              proxied: Sequence[str] = ()) -> list[CalendarEntry]:
    """Every booked run, and the planned campaigns' past sessions. A proxy-mode
    campaign's run that ended but whose results are not in the time-series store yet
    still holds its slot (until the slot's end at the latest): the proxy's next answer
    for that SIM must see them (each SIM is booked one window ahead, lanes._one_ahead).
    Without this, a pass between the run's end and its ingest (the bundle's upload, then
    ingest every few seconds) could answer from the points before it: after a full session,
    "too few TATs", and would book a second full session."""
    planned = set(campaign_ids)
    entries: list[CalendarEntry] = []
    awaiting = select(Run).where(
        Run.campaign_id.in_(set(proxied)), Run.state.in_((RunState.UPLOADING, RunState.DONE)),
        Run.ingested_at.is_(None), Run.deadline > now)
    held = [*s.scalars(select(Run).where(Run.state.in_(BOOKED))).all(),
            *(s.scalars(awaiting).all() if proxied else ())]
    for run in held:
        key = session_key(run)
        owner = f"run {run.id}" + (f" of campaign {run.campaign_id}" if run.campaign_id else "")
        entries.append(CalendarEntry(
            NodeId(run.node_id), run.not_before, run.deadline, owner, EntryStatus.HELD,
            key if key is not None and key.campaign in planned else None))
    if not planned:
        return entries
    past = s.scalars(select(Run).where(
        Run.campaign_id.in_(planned), Run.session_occurrence.is_not(None),
        Run.state.not_in(BOOKED))).all()
    # Every attempt books the whole session, so its first run (step 0 of repetition 0
    # on the first interface) counts the attempts.
    attempts: dict[SessionKey, int] = defaultdict(int)
    for run in past:
        key = session_key(run)
        if (key is not None and run.step == 0 and run.repetition == 0
                and run.interface == key.interfaces[0]):
            attempts[key] += 1
    limit = ctx.settings.scheduling.session_attempts
    for run in past:
        key = session_key(run)
        assert key is not None
        if RunState(run.state) in RETRIED and attempts[key] < limit:
            status = EntryStatus.FAILED
        else:  # finished, or failed as often as allowed: not booked again
            status = EntryStatus.DONE
        entries.append(CalendarEntry(NodeId(run.node_id), run.not_before, run.deadline,
                                     f"run {run.id}", status, key))
    return entries


def build_snapshot(ctx: Context, s: Session, now: datetime,
                   campaign_ids: Sequence[str],
                   campaigns: Sequence[PlanCampaign] = ()) -> Snapshot:
    """The planner's input; ``campaigns`` in proxy mode also get their SIMs' answers to
    "is the expensive measurement needed now", from the installed studies
    (:mod:`orchestrator.services.planhooks`)."""
    nodes = s.scalars(select(Node).order_by(Node.id)).all()
    facts = [
        NodeFacts(
            id=NodeId(n.id), country=n.country, timezone=n.timezone, model=n.model,
            architecture=n.architecture, mobility=n.mobility,
            tags=frozenset(str(t) for t in n.tags),
            sims=tuple(SimFacts(i.name, i.mcc_mnc, i.operator_name)
                       for i in n.interfaces if i.up),
        )
        for n in nodes
    ]
    sched = ctx.settings.scheduling
    return Snapshot(
        now=now,
        nodes=facts,
        catalogue=ctx.catalogue,
        quotas=quotas.ledger_state(s, ctx.settings, nodes),
        history=link_history(s, now),
        calendar=_calendar(ctx, s, campaign_ids, now=now,
                           proxied=[c.id for c in campaigns if c.spec.proxy is not None]),
        unavailable=unavailable_nodes(ctx, nodes, now),
        padding_s=sched.padding_s,
        rates=rate_policy(ctx.settings),
        proxy=proxy_verdicts(ctx.timeseries, campaigns, facts, now),
    )


def decision_doc(d: Decision) -> dict[str, Any]:
    return {
        "kind": d.kind.value, "code": d.code.value, "message": d.message,
        "node": d.node, "interface": d.sim.interface if d.sim else None,
        "mcc_mnc": d.sim.mcc_mnc if d.sim else None, "count": d.count,
        "first": d.first.isoformat() if d.first else None,
        "last": d.last.isoformat() if d.last else None,
    }


def replan_in(ctx: Context, s: Session, now: datetime) -> PlanPublic:
    """Plan every planner-managed campaign inside the caller's unit of work (the caller
    took it from ``ctx.planning()``)."""
    rows = {r.id: r for r in s.scalars(select(Campaign).where(
        Campaign.planned_at.is_not(None), Campaign.cancelled_at.is_(None),
        Campaign.deleted_at.is_(None)))}
    campaigns: list[PlanCampaign] = []
    for row in rows.values():
        try:
            spec = parse_spec(row.spec, ctx.catalogue)
        except Invalid as e:  # stored before a validation rule tightened: say so
            log.error("campaign %s cannot be planned: %s", row.id, e)
            row.decisions = [decision_doc(Decision(
                DecisionKind.SKIPPED, ReasonCode.BAD_SPEC, CampaignId(row.id),
                f"skipped: its stored spec no longer passes validation ({e}); cancel or "
                "delete it and submit a corrected one"))]
            row.planned_at = now
            continue
        # Whole seconds: the planner names sessions by their window's start in seconds.
        campaigns.append(PlanCampaign(CampaignId(row.id), spec,
                                      row.created_at.replace(microsecond=0)))
    if not campaigns:
        # Nothing to plan: the snapshot (every node, the ledger summed over the runs,
        # every booked run as the calendar) would be read for nothing, every minute (at
        # 10,000 nodes, seconds of CPU beside the heartbeats).
        s.flush()
        return PlanPublic(planned_at=now, campaigns=0, runs_booked=0, decisions=0)
    snapshot = build_snapshot(ctx, s, now, [c.id for c in campaigns], campaigns)
    result = plan(snapshot, campaigns,
                  horizon=timedelta(seconds=ctx.settings.scheduling.horizon_s))
    booked = write_bookings(s, result, rows, ctx.catalogue, now)
    by_campaign: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in result.decisions:
        by_campaign[d.campaign].append(decision_doc(d))
    for c in campaigns:
        rows[c.id].decisions = by_campaign.get(c.id, [])
        rows[c.id].planned_at = now
    s.flush()
    return PlanPublic(planned_at=now, campaigns=len(campaigns), runs_booked=booked,
                      decisions=len(result.decisions))


def replan(ctx: Context) -> PlanPublic:
    """One planning pass in its own unit of work."""
    ctx.replan_wanted.clear()
    with ctx.planning() as s:
        return replan_in(ctx, s, ctx.clock.now())
