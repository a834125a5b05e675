"""Node provisioning, registration and heartbeats.

A heartbeat is the node's only chance to receive work (it sits behind NAT), so the
reply carries every run it should hold: its whole schedule for the hand-out horizon (a
day by default, ``scheduling.handout_horizon_s``: a node on a train may be offline for
hours and goes on measuring from what it holds), minus the runs it says it already
holds, so a lost reply loses nothing; which held runs were cancelled meanwhile; and
what is left of each SIM's cap, for the node's local account while offline.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from orchestrator.errors import Conflict, Invalid, NotFound
from orchestrator.model.contact import dropped_note, releases_dropped
from orchestrator.model.ids import new_token
from orchestrator.schemas import MaintenanceUpdate, NodeCreate, NodeCreated, NodePublic
from orchestrator.services import quotas
from orchestrator.services.auth import Principal, authenticate_node, hash_token
from orchestrator.services.context import Context
from orchestrator.services.runs import transition
from orchestrator.services.views import node_public
from orchestrator.store.tables import Interface, Node, Run, RunEvent
from orchestrator.timeseries.lineprotocol import Point, encode, shifted
from orchestrator.timeseries.nodeclock import heartbeat_shift
from orchestrator.timeseries.schema import RunContext, live_points
from testbed_common import wire
from testbed_common.states import RunState

log = logging.getLogger(__name__)
ACTIVE_ON_NODE = (RunState.ASSIGNED, RunState.DEPLOYING, RunState.RUNNING)


def create_node(ctx: Context, principal: Principal, body: NodeCreate) -> NodeCreated:
    principal.require_admin()
    _check_timezone(body.timezone)
    token = new_token()
    now = ctx.clock.now()
    with ctx.db.session() as s:
        if s.get(Node, body.id) is not None:
            raise Conflict(f"node {body.id!r} already exists; pick another id")
        node = Node(
            id=body.id,
            token_hash=hash_token(token),
            country=body.country,
            timezone=body.timezone,
            model=body.model,
            architecture=body.architecture,
            mobility=body.mobility,
            tags=body.tags,
            created_at=now,
            interfaces=[],
        )
        s.add(node)
        s.flush()
        public = node_public(node, now, ctx.settings.health)
    return NodeCreated(node=public, token=token)


def _check_timezone(name: str) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise Invalid(f"unknown time zone {name!r}; use an IANA name like Europe/Stockholm") from e


def list_nodes(ctx: Context) -> list[NodePublic]:
    now = ctx.clock.now()
    with ctx.db.session() as s:
        # Interfaces in one query, not one per node (the fleet page lists 10,000)
        nodes = s.scalars(select(Node).options(selectinload(Node.interfaces))
                          .order_by(Node.id)).all()
        return [node_public(n, now, ctx.settings.health) for n in nodes]


def get_node(ctx: Context, node_id: str) -> NodePublic:
    with ctx.db.session() as s:
        node = s.get(Node, node_id)
        if node is None:
            raise NotFound(f"no node {node_id!r}; list them with `testbed node list`")
        return node_public(node, ctx.clock.now(), ctx.settings.health)


def set_maintenance(
    ctx: Context, principal: Principal, node_id: str, body: MaintenanceUpdate
) -> NodePublic:
    principal.require_admin()
    with ctx.db.session() as s:
        node = s.get(Node, node_id)
        if node is None:
            raise NotFound(f"no node {node_id!r}")
        node.maintenance = body.maintenance
        public = node_public(node, ctx.clock.now(), ctx.settings.health)
    ctx.replan_wanted.set()
    return public


def _update_interfaces(
    s: Session, node: Node, reports: list[wire.InterfaceReport], now: datetime
) -> None:
    current = {i.name: i for i in node.interfaces}
    for r in reports:
        row = current.get(r.name)
        if row is None:
            row = Interface(
                node_id=node.id,
                name=r.name,
                mcc_mnc=r.operator.mcc_mnc,
                operator_name=r.operator.name,
                updated_at=now,
            )
            node.interfaces.append(row)
        row.mcc_mnc = r.operator.mcc_mnc
        row.operator_name = r.operator.name
        row.rat = r.rat
        row.address = r.address
        row.up = r.up
        row.rx_bytes = r.rx_bytes
        row.tx_bytes = r.tx_bytes
        row.modem_model = r.modem_model
        row.updated_at = now


def register(ctx: Context, token: str | None, body: wire.Registration) -> wire.RegistrationReply:
    now = ctx.clock.now()
    with ctx.db.session() as s:
        node = authenticate_node(s, token)
        node.agent_version = body.agent_version
        node.model = body.model if body.model != "unknown" else node.model
        node.architecture = (
            body.architecture if body.architecture != "unknown" else node.architecture
        )
        node.registered_at = now
        node.last_heartbeat_at = now
        _update_interfaces(s, node, body.interfaces, now)
        # Assigned runs are not among them: a node that lost its book is handed them
        # again by its next heartbeat (a day of them, with the hand-out horizon).
        active = s.scalars(
            select(Run.id).where(Run.node_id == node.id,
                                 Run.state.in_((RunState.DEPLOYING, RunState.RUNNING,
                                                RunState.UNREACHABLE)))
        ).all()
        return wire.RegistrationReply(
            node_id=node.id,
            heartbeat_interval_s=ctx.settings.health.heartbeat_interval_s,
            active_run_ids=list(active),
        )


def _buffer_live_points(ctx: Context, node: Node, meta: wire.LiveMetadata) -> None:
    """The heartbeat's samples as points for the ingest loop to write. A malformed
    sample is logged and skipped: telemetry must never cost the node its work."""
    try:
        points = live_points(modems=meta.modems, gps=meta.gps, system=meta.system,
                             ctx=RunContext(node=node.id, country=node.country))
    except (ValueError, KeyError, TypeError) as e:
        log.warning("node %s: heartbeat metadata not turned into points: %s", node.id, e)
        return
    # Stamped on the node's clock: to orchestrator time, as its runs' points are.
    points = shifted(points, heartbeat_shift(node.clock_offset_s))
    ctx.live.add([p for p in points if _encodable(node.id, p)])


def _encodable(node_id: str, p: Point) -> bool:
    """Whether line protocol can carry ``p``. A point it cannot (a line break or a
    trailing backslash in a tag, an infinite or over-64-bit value) is dropped here: in
    the buffer it would fail every later write of the live points, for good."""
    try:
        encode(p)
    except (ValueError, TypeError) as e:
        log.warning("node %s: heartbeat sample dropped: %s", node_id, e)
        return False
    return True


def heartbeat(ctx: Context, token: str | None, body: wire.Heartbeat) -> wire.HeartbeatReply:
    now = ctx.clock.now()
    interval = ctx.settings.health.heartbeat_interval_s
    with ctx.db.session() as s:
        node = authenticate_node(s, token)
        node.last_heartbeat_at = now
        node.clock_offset_s = body.clock_offset_s
        node.disk_free_bytes = body.disk_free_bytes
        node.spooled_bundles = body.spooled_bundles
        _update_interfaces(s, node, body.interfaces, now)
        if body.metadata is not None:
            node.metadata_unavailable = dict(body.metadata.unavailable)
            if ctx.timeseries is not None:
                _buffer_live_points(ctx, node, body.metadata)
        pending = set(body.pending_run_ids)
        assignments, due = (([], []) if node.maintenance
                            else _hand_out(ctx, s, node, now, pending))
        cancel: list[str] = []
        held_ids = set(body.running_run_ids) | pending
        if held_ids:
            # The runs it holds are mostly those just read as due: read only the others
            known = {r.id: r for r in due if r.id in held_ids}
            rest = held_ids - known.keys()
            held = [*known.values(), *(s.scalars(select(Run).where(Run.id.in_(rest))).all()
                                       if rest else ())]
            for r in held:
                if (r.id in body.running_run_ids and r.node_id == node.id
                        and r.state == RunState.UNREACHABLE):
                    transition(s, r, RunState.RUNNING,
                               f"node {node.id} back in contact: the run is still running",
                               source=f"node:{node.id}", at=now)
            # A run cancelled (or ended) while the node held it, e.g. while it was
            # offline: the node stops it, or drops it from its book.
            cancel = sorted(
                r.id
                for r in held
                if r.node_id != node.id
                or RunState(r.state) in (RunState.CANCELLED, RunState.FAILED, RunState.EXPIRED)
            )
        released = _release_dropped(s, node, body.dropped_run_ids, now)
        sim_left = quotas.sim_left_for_node(s, ctx.settings, node, now)
        reply = wire.HeartbeatReply(
            server_time=now,
            heartbeat_interval_s=interval,
            assignments=assignments,
            cancel_run_ids=cancel,
            sim_left_bytes=sim_left,
        )
    if released:
        ctx.replan_wanted.set()  # the released bytes may be booked again
    return reply


def _release_dropped(s: Session, node: Node, dropped: list[str], now: datetime) -> int:
    """Settle as not started each cancelled run whose reservation was held until its node
    said it dropped the run unstarted (``Heartbeat.dropped_run_ids``); ids of other
    nodes' runs, or of runs not cancelled or already settled, change nothing. Returns
    how many were released."""
    if not dropped:
        return 0
    released = 0
    for r in s.scalars(select(Run).where(Run.id.in_(dropped))).all():
        if not releases_dropped(run_node=r.node_id, node_id=node.id,
                                state=RunState(r.state), settled=r.settled_at is not None):
            continue
        if quotas.settle(s, r, at=now, started=False) is None:
            continue  # booked before quotas: nothing held
        s.add(RunEvent(run_id=r.id, state=r.state, reason=dropped_note(node.id),
                       source=f"node:{node.id}", at=now))
        released += 1
    return released


def _hand_out(ctx: Context, s: Session, node: Node, now: datetime,
              pending: set[str]) -> tuple[list[wire.Assignment], list[Run]]:
    """The node's schedule for the hand-out horizon: every booked run due within
    ``scheduling.handout_horizon_s``, earliest first, at most ``handout_max_runs``. Each
    becomes ``assigned``; those the node says it holds (``pending``) are not sent again,
    the others are (a lost reply loses nothing). Returns the assignments and the due
    runs read."""
    sched = ctx.settings.scheduling
    horizon = now + timedelta(seconds=sched.handout_horizon_s)
    due = s.scalars(
        select(Run)
        .where(
            Run.node_id == node.id,
            Run.state.in_((RunState.SCHEDULED, RunState.ASSIGNED)),
            Run.not_before <= horizon,
        )
        .order_by(Run.not_before, Run.id)
        .limit(sched.handout_max_runs)
    ).all()
    out: list[wire.Assignment] = []
    for run in due:
        if run.state == RunState.SCHEDULED:
            try:
                transition(s, run, RunState.ASSIGNED, "handed to the node on heartbeat",
                           source="orchestrator", at=now)
            except Conflict:  # moved meanwhile (another replica, the reaper, a cancel)
                if run.state != RunState.ASSIGNED:
                    continue
        if run.id in pending:
            continue
        out.append(wire.Assignment(
            run_id=run.id,
            experiment=run.experiment,
            image=run.image,
            parameters=run.parameters,
            interface=run.interface,
            not_before=run.not_before,
            deadline=run.deadline,
            max_bytes=run.forecast_bytes,
        ))
    return out, list(due)
