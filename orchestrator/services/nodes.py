"""Node provisioning, registration and heartbeats.

A heartbeat is the node's only chance to receive work (it sits behind NAT), so the
reply carries every run it should hold: its whole schedule for the hand-out horizon (a
day by default, ``scheduling.handout_horizon_s``: a node on a train may be offline for
hours and goes on measuring from what it holds), minus the runs it says it already
holds, so a lost reply loses nothing; which held runs were cancelled meanwhile; and
what is left of each SIM's cap, for the node's local account while offline.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime, timedelta
from typing import Any, NamedTuple, cast

from sqlalchemy import Table, and_, bindparam, insert, select, update
from sqlalchemy.orm import Session, selectinload

from orchestrator.errors import Conflict, Invalid, NotFound, Unauthorized
from orchestrator.model.contact import dropped_note, releases_dropped
from orchestrator.model.ids import new_token
from orchestrator.model.platforms import native_tools_tags
from orchestrator.schemas import MaintenanceUpdate, NodeCreate, NodeCreated, NodePublic
from orchestrator.services import quotas
from orchestrator.services.auth import (
    UNKNOWN_NODE_TOKEN,
    Principal,
    authenticate_node,
    hash_token,
    node_token_hash,
)
from orchestrator.services.context import Context
from orchestrator.services.runs import transition
from orchestrator.services.views import node_public
from orchestrator.store.tables import Interface, Node, Run, RunEvent, SimQuota
from orchestrator.timeseries.lineprotocol import Point, encode, shifted
from orchestrator.timeseries.nodeclock import heartbeat_shift
from orchestrator.timeseries.schema import RunContext, live_points
from testbed_common import wire
from testbed_common.platforms import UNKNOWN, oci_architecture
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
        reported = oci_architecture(body.architecture)
        node.architecture = reported if reported != UNKNOWN else node.architecture
        node.tags = native_tools_tags(node.tags, has_tools=body.native_tools)
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


def _buffer_live_points(ctx: Context, node: _Beating, meta: wire.LiveMetadata) -> None:
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


# The heartbeat is the fleet's most frequent request (167 a second at 10,000 nodes), so
# its usual path is SQLAlchemy Core: a handful of statements on columns, no ORM rows,
# built once with bound parameters (building a statement and its cache key cost more
# CPU than executing it). The rare moves (a run handed out for the first time, a run
# back in contact) go through ``transition`` on ORM rows, as every other move does.
_NODES = cast(Table, Node.__table__)
_IFACES = cast(Table, Interface.__table__)
_QUOTAS = cast(Table, SimQuota.__table__)
_RUNS = cast(Table, Run.__table__)
#: The node by its token hash, SET from the parameters' other keys (the node's figures).
_BEAT = (update(_NODES).where(_NODES.c.token_hash == bindparam("b_token"))
         .returning(_NODES.c.id, _NODES.c.country, _NODES.c.timezone, _NODES.c.maintenance,
                    _NODES.c.clock_offset_s))
#: The node's interfaces and their quota rows.
_SIMS = (select(_IFACES.c.name, _IFACES.c.mcc_mnc, _QUOTAS.c.cap_bytes, _QUOTAS.c.reset_day,
                _QUOTAS.c.margin)
         .select_from(_IFACES.outerjoin(_QUOTAS, and_(_QUOTAS.c.node_id == _IFACES.c.node_id,
                                                      _QUOTAS.c.interface == _IFACES.c.name)))
         .where(_IFACES.c.node_id == bindparam("b_node")))
#: One interface, SET from the parameters' other keys (executed for several at once).
_IFACE = update(_IFACES).where(_IFACES.c.node_id == bindparam("b_node"),
                               _IFACES.c.name == bindparam("b_name"))
_QUOTA_ROWS = (select(_QUOTAS.c.interface, _QUOTAS.c.cap_bytes, _QUOTAS.c.reset_day,
                      _QUOTAS.c.margin)
               .where(_QUOTAS.c.node_id == bindparam("b_node"),
                      _QUOTAS.c.interface.in_(bindparam("b_names", expanding=True))))
#: The node's booked runs due by the horizon, earliest first.
_DUE = (select(_RUNS.c.id, _RUNS.c.state, _RUNS.c.node_id, _RUNS.c.experiment, _RUNS.c.image,
               _RUNS.c.parameters, _RUNS.c.interface, _RUNS.c.not_before, _RUNS.c.deadline,
               _RUNS.c.forecast_bytes)
        .where(_RUNS.c.node_id == bindparam("b_node"),
               _RUNS.c.state.in_((RunState.SCHEDULED.value, RunState.ASSIGNED.value)),
               _RUNS.c.not_before <= bindparam("b_horizon"))
        .order_by(_RUNS.c.not_before, _RUNS.c.id)
        .limit(bindparam("b_limit")))
#: The runs among those a node says it holds that are its own: another node's run is
#: never read, so the reply cannot depend on whether it exists (docs/security.md).
_HELD = (select(_RUNS.c.id, _RUNS.c.node_id, _RUNS.c.state)
         .where(_RUNS.c.id.in_(bindparam("b_ids", expanding=True)),
                _RUNS.c.node_id == bindparam("b_node")))


class _Beating(NamedTuple):
    """The heartbeating node, as its heartbeat's UPDATE returns it."""

    id: str
    country: str
    timezone: str
    maintenance: bool
    clock_offset_s: float | None


def _beat(s: Session, token: str | None, body: wire.Heartbeat, now: datetime) -> _Beating:
    """Authenticate the node by its token and record the heartbeat, in one UPDATE."""
    values: dict[str, Any] = {
        "b_token": node_token_hash(token), "last_heartbeat_at": now,
        "clock_offset_s": body.clock_offset_s, "disk_free_bytes": body.disk_free_bytes,
        "spooled_bundles": body.spooled_bundles}
    if body.metadata is not None:
        values["metadata_unavailable"] = dict(body.metadata.unavailable)
    row = s.execute(_BEAT, values).one_or_none()
    if row is None:
        raise Unauthorized(UNKNOWN_NODE_TOKEN)
    return _Beating(*row)


def _beat_interfaces(s: Session, node_id: str, reports: list[wire.InterfaceReport],
                     now: datetime) -> list[quotas.NodeSim]:
    """Store the reported interfaces (new ones added, the others updated; those not
    reported are kept) and return all the node's interfaces with their quota rows."""
    sims = {name: quotas.NodeSim(name, mcc_mnc, None if cap is None else (cap, day, margin))
            for name, mcc_mnc, cap, day, margin in s.execute(_SIMS, {"b_node": node_id})}
    rows: list[dict[str, Any]] = [
        {"mcc_mnc": r.operator.mcc_mnc, "operator_name": r.operator.name, "rat": r.rat,
         "address": r.address, "up": r.up, "rx_bytes": r.rx_bytes, "tx_bytes": r.tx_bytes,
         "modem_model": r.modem_model, "updated_at": now, "b_name": r.name}
        for r in reports]
    old = [row for row in rows if row["b_name"] in sims]
    new = [row for row in rows if row["b_name"] not in sims]
    if old:
        s.execute(_IFACE, [{**row, "b_node": node_id} for row in old])
        for row in old:
            sims[row["b_name"]] = sims[row["b_name"]]._replace(mcc_mnc=row["mcc_mnc"])
    if new:
        names = [row.pop("b_name") for row in new]
        s.execute(insert(_IFACES), [{**row, "node_id": node_id, "name": name}
                                    for name, row in zip(names, new, strict=True)])
        configured: dict[str, quotas.QuotaRow] = {
            name: (cap, day, margin) for name, cap, day, margin in s.execute(
                _QUOTA_ROWS, {"b_node": node_id, "b_names": names})}
        for name, row in zip(names, new, strict=True):
            sims[name] = quotas.NodeSim(name, row["mcc_mnc"], configured.get(name))
    return list(sims.values())


def heartbeat(ctx: Context, token: str | None, body: wire.Heartbeat) -> wire.HeartbeatReply:
    now = ctx.clock.now()
    interval = ctx.settings.health.heartbeat_interval_s
    with ctx.db.session() as s:
        node = _beat(s, token, body, now)
        sims = _beat_interfaces(s, node.id, body.interfaces, now)
        if body.metadata is not None and ctx.timeseries is not None:
            _buffer_live_points(ctx, node, body.metadata)
        pending = set(body.pending_run_ids)
        assignments, due = (([], {}) if node.maintenance
                            else _hand_out(ctx, s, node.id, now, pending))
        cancel: list[str] = []
        held_ids = set(body.running_run_ids) | pending
        if held_ids:
            # The runs it holds are mostly those just read as due: read only the others
            held = {rid: due[rid] for rid in held_ids if rid in due}
            rest = held_ids - held.keys()
            if rest:
                held.update((rid, (run_node, state)) for rid, run_node, state in s.execute(
                    _HELD, {"b_ids": list(rest), "b_node": node.id}))
            back = [rid for rid, (run_node, state) in held.items()
                    if rid in body.running_run_ids and run_node == node.id
                    and state == RunState.UNREACHABLE]
            for r in (s.scalars(select(Run).where(Run.id.in_(back))).all() if back else ()):
                transition(s, r, RunState.RUNNING,
                           f"node {node.id} back in contact: the run is still running",
                           source=f"node:{node.id}", at=now)
                held[r.id] = (r.node_id, r.state)
            # A run cancelled (or ended) while the node held it, e.g. while it was
            # offline: the node stops it, or drops it from its book. So does a run that
            # is not its own, whether another node's or none at all: one answer for both.
            cancel = sorted(
                rid for rid in held_ids
                if rid not in held or held[rid][0] != node.id
                or RunState(held[rid][1]) in (RunState.CANCELLED, RunState.FAILED,
                                              RunState.EXPIRED)
            )
        released = _release_dropped(s, node.id, body.dropped_run_ids, now)
        sim_left = quotas.sim_left_for_node(s, ctx.settings, node.id, node.timezone, sims, now)
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


def _release_dropped(s: Session, node_id: str, dropped: list[str], now: datetime) -> int:
    """Settle as not started each cancelled run whose reservation was held until its node
    said it dropped the run unstarted (``Heartbeat.dropped_run_ids``); ids of other
    nodes' runs, or of runs not cancelled or already settled, change nothing. Returns
    how many were released."""
    if not dropped:
        return 0
    released = 0
    for r in s.scalars(select(Run).where(Run.id.in_(dropped), Run.node_id == node_id)).all():
        if not releases_dropped(run_node=r.node_id, node_id=node_id,
                                state=RunState(r.state), settled=r.settled_at is not None):
            continue
        if quotas.settle(s, r, at=now, started=False) is None:
            continue  # booked before quotas: nothing held
        s.add(RunEvent(run_id=r.id, state=r.state, reason=dropped_note(node_id),
                       source=f"node:{node_id}", at=now))
        released += 1
    return released


def _confinement(ctx: Context, experiment: str) -> dict[str, Any]:
    """What the experiment's manifest asks of the node for a run (resources and
    capabilities); an experiment no longer in the catalogue gets the node's defaults
    and no capability."""
    manifest = ctx.catalogue.get(experiment)
    if manifest is None:
        return {}
    return {"resources": manifest.resources, "capabilities": list(manifest.capabilities)}


def _hand_out(ctx: Context, s: Session, node_id: str, now: datetime, pending: set[str]
              ) -> tuple[list[wire.Assignment], dict[str, tuple[str, str]]]:
    """The node's schedule for the hand-out horizon: every booked run due within
    ``scheduling.handout_horizon_s``, earliest first, at most ``handout_max_runs``. Each
    becomes ``assigned``; those the node says it holds (``pending``) are not sent again,
    the others are (a lost reply loses nothing). Returns the assignments and the due
    runs read (id: node, state)."""
    sched = ctx.settings.scheduling
    horizon = now + timedelta(seconds=sched.handout_horizon_s)
    due = s.execute(_DUE, {"b_node": node_id, "b_horizon": horizon,
                           "b_limit": sched.handout_max_runs}).all()
    states = {run.id: run.state for run in due}
    scheduled = [run.id for run in due if run.state == RunState.SCHEDULED]
    for row in (s.scalars(select(Run).where(Run.id.in_(scheduled))).all() if scheduled else ()):
        if row.state == RunState.SCHEDULED:
            # Conflict: moved meanwhile (another replica, the reaper, a cancel)
            with contextlib.suppress(Conflict):
                transition(s, row, RunState.ASSIGNED, "handed to the node on heartbeat",
                           source="orchestrator", at=now)
        states[row.id] = row.state
    out: list[wire.Assignment] = []
    for run in due:
        if states[run.id] != RunState.ASSIGNED or run.id in pending:
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
            **_confinement(ctx, run.experiment),
        ))
    return out, {run.id: (run.node_id, states[run.id]) for run in due}
