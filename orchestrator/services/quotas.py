"""Quotas against the database: SIM caps, project budgets, reservations, settlement.

The pure ledger (``orchestrator.quotas.ledger``) decides; this module feeds it. The
runs table is the ledger's journal: each run carries its reservation (SIM, period,
bytes) and, once settled, what was charged. Usage per SIM and period is summed from
it, so there is no second copy of the numbers to drift out of step.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from orchestrator.errors import Conflict, NotFound
from orchestrator.model.ids import NodeId
from orchestrator.quotas.ledger import (
    LedgerState,
    ProjectBudget,
    ProjectId,
    QuotaLedger,
    Refusal,
    Reservation,
    SimKey,
    Usage,
    fmt_bytes,
)
from orchestrator.quotas.ledger import SimQuota as Quota
from orchestrator.schemas import (
    BudgetUpdate,
    ProjectQuotaPublic,
    QuotasPublic,
    QuotaUpdate,
    SimQuotaPublic,
)
from orchestrator.services.access import read_scope
from orchestrator.services.auth import Principal
from orchestrator.services.context import Context
from orchestrator.settings import Settings
from orchestrator.store.tables import Node, Project, Run, RunEvent, SimQuota
from orchestrator.timeseries.lineprotocol import Point
from orchestrator.timeseries.schema import quota_point
from testbed_common.states import RunState

log = logging.getLogger(__name__)

#: States in which a run has not moved a byte on its modem interface yet.
NOT_STARTED = (RunState.SCHEDULED, RunState.ASSIGNED, RunState.DEPLOYING)


def sim_key(node_id: str, interface: str, mcc_mnc: str) -> SimKey:
    return SimKey(NodeId(node_id), interface, mcc_mnc)


def _quotas(s: Session, settings: Settings, nodes: Iterable[Node]) -> dict[SimKey, Quota]:
    rows = {(q.node_id, q.interface): q for q in s.scalars(select(SimQuota)).all()}
    default = settings.scheduling.default_sim_cap_bytes
    out: dict[SimKey, Quota] = {}
    for node in nodes:
        for iface in node.interfaces:
            key = sim_key(node.id, iface.name, iface.mcc_mnc)
            row = rows.get((node.id, iface.name))
            if row is not None:
                out[key] = Quota(key, row.cap_bytes, row.reset_day, row.margin, node.timezone)
            elif default is not None:
                out[key] = Quota(key, default, 1, settings.scheduling.quota_margin,
                                 node.timezone)
    return out


def ledger_state(s: Session, settings: Settings, nodes: Iterable[Node] | None = None
                 ) -> LedgerState:
    """Caps, budgets and usage as the ledger's frozen state."""
    if nodes is None:
        nodes = s.scalars(select(Node)).all()
    charged = func.coalesce(Run.charged_bytes, 0)
    reserved = case((Run.settled_at.is_(None), Run.reserved_bytes), else_=0)
    overrun = case((Run.charged_bytes > Run.reserved_bytes,
                    Run.charged_bytes - Run.reserved_bytes), else_=0)
    sums = (func.sum(charged), func.sum(reserved), func.sum(overrun))
    sim_usage: dict[tuple[SimKey, datetime], Usage] = {}
    rows = s.execute(
        select(Run.node_id, Run.interface, Run.mcc_mnc, Run.reservation_period, *sums)
        .where(Run.reserved_bytes.is_not(None), Run.mcc_mnc.is_not(None),
               Run.reservation_period.is_not(None))
        .group_by(Run.node_id, Run.interface, Run.mcc_mnc, Run.reservation_period)
    ).all()
    for node_id, iface, mcc_mnc, period, used, res, over in rows:
        sim_usage[(sim_key(node_id, iface, mcc_mnc), period)] = Usage(
            int(used or 0), int(res or 0), int(over or 0))
    project_usage = {
        ProjectId(name): Usage(int(used or 0), int(res or 0), int(over or 0))
        for name, used, res, over in s.execute(
            select(Project.name, *sums).join(Run, Run.project_id == Project.id)
            .where(Run.reserved_bytes.is_not(None)).group_by(Project.name)
        ).all()
    }
    budgets = {
        ProjectId(p.name): ProjectBudget(ProjectId(p.name), p.budget_bytes)
        for p in s.scalars(select(Project).where(Project.budget_bytes.is_not(None))).all()
        if p.budget_bytes is not None
    }
    return LedgerState(_quotas(s, settings, nodes), budgets, sim_usage, project_usage)


def reserve(s: Session, settings: Settings, *, node: Node, interface: str, project: Project,
            nbytes: int, at: datetime, holder: str) -> Reservation:
    """Reserve an ad-hoc run's forecast volume, or raise :class:`Conflict` saying why
    not (no cap configured, the cap or the project budget would be passed)."""
    iface = next(i for i in node.interfaces if i.name == interface)
    ledger = QuotaLedger(ledger_state(s, settings))
    got = ledger.reserve(sim=sim_key(node.id, interface, iface.mcc_mnc),
                         project=ProjectId(project.name), nbytes=nbytes, at=at, holder=holder)
    if isinstance(got, Refusal):
        raise Conflict(f"not booked: {got.message}", code=got.code.value)
    return got


def settle(s: Session, run: Run, *, at: datetime) -> None:
    """Settle the run's reservation once, from its current state: the measured bytes
    when the agent reported them; nothing for a run that never started; the whole
    reservation for one that ran but went unmeasured (the safe side). An overrun is
    recorded as an event and shows in the SIM's usage."""
    if run.reserved_bytes is None or run.settled_at is not None:
        return
    if run.measured_bytes is not None:
        charged, how = run.measured_bytes, "measured by the agent"
    elif RunState(run.state) in NOT_STARTED:
        charged, how = 0, "the run never started: reservation released"
    else:
        charged, how = run.reserved_bytes, "not measured: the whole reservation is charged"
    run.charged_bytes = charged
    run.settled_at = at
    overrun = charged - run.reserved_bytes
    if overrun > 0:
        note = (f"quota overrun: {fmt_bytes(charged)} {how}, {fmt_bytes(overrun)} over the "
                f"{fmt_bytes(run.reserved_bytes)} reserved on SIM {run.mcc_mnc} of "
                f"{run.node_id}/{run.interface}")
        log.warning("run %s: %s", run.id, note)
        s.add(RunEvent(run_id=run.id, state=run.state, reason=note, source="orchestrator",
                       at=at))


# --- operator-facing ---------------------------------------------------------------


def _node(s: Session, node_id: str) -> Node:
    node = s.get(Node, node_id)
    if node is None:
        raise NotFound(f"no node {node_id!r}; list them with `testbed node list`")
    return node


def set_quota(ctx: Context, principal: Principal, node_id: str, interface: str,
              body: QuotaUpdate) -> SimQuotaPublic:
    principal.require_admin()
    with ctx.db.session() as s:
        _node(s, node_id)
        row = s.get(SimQuota, (node_id, interface))
        if row is None:
            row = SimQuota(node_id=node_id, interface=interface)
            s.add(row)
        row.cap_bytes, row.reset_day, row.margin = body.cap_bytes, body.reset_day, body.margin
        row.updated_at = ctx.clock.now()
        s.flush()
    ctx.replan_wanted.set()
    return get_quota(ctx, node_id, interface)


def get_quota(ctx: Context, node_id: str, interface: str) -> SimQuotaPublic:
    with ctx.db.session() as s:
        node = _node(s, node_id)
        found = [q for q in _statuses(ctx, s, [node]) if q.interface == interface]
        if not found:
            names = [i.name for i in node.interfaces]
            raise NotFound(f"node {node_id} has no interface {interface!r} and no quota for "
                           f"it; it has {names}")
        return found[0]


def list_quotas(ctx: Context) -> QuotasPublic:
    with ctx.db.session() as s:
        nodes = s.scalars(select(Node).order_by(Node.id)).all()
        state = ledger_state(s, ctx.settings, nodes)
        ledger = QuotaLedger(state)
        projects = []
        for p in s.scalars(select(Project).order_by(Project.name)).all():
            st = ledger.project_status(ProjectId(p.name))
            projects.append(ProjectQuotaPublic(
                project=p.name, limit=p.budget_bytes, used=st.used, reserved=st.reserved,
                remaining=st.remaining if p.budget_bytes is not None else None,
                overrun=st.overrun))
        return QuotasPublic(sims=_statuses(ctx, s, nodes, state), projects=projects)


def quotas_for(ctx: Context, principal: Principal) -> QuotasPublic:
    """What a caller sees of the ledger: every SIM (the fleet is shared, and a SIM near
    its cap explains a deferred session to anyone), but only the budgets of the caller's
    projects (services.access)."""
    whole = list_quotas(ctx)
    with ctx.db.session() as s:
        scope = read_scope(s, principal)
        if scope.everything:
            return whole
        mine = set(s.scalars(select(Project.name).where(scope.where(Project.id))).all())
    return whole.model_copy(update={"projects": [p for p in whole.projects
                                                 if p.project in mine]})


def _statuses(ctx: Context, s: Session, nodes: Iterable[Node],
              state: LedgerState | None = None) -> list[SimQuotaPublic]:
    nodes = list(nodes)
    state = state or ledger_state(s, ctx.settings, nodes)
    ledger = QuotaLedger(state)
    now = ctx.clock.now()
    rows = {(q.node_id, q.interface): q for q in s.scalars(select(SimQuota)).all()}
    out = []
    for node in nodes:
        seen = set()
        for iface in node.interfaces:
            seen.add(iface.name)
            key = sim_key(node.id, iface.name, iface.mcc_mnc)
            quota = state.sims.get(key)
            st = ledger.sim_status(key, now)
            source = ("configured" if (node.id, iface.name) in rows
                      else "default" if quota is not None else "none")
            out.append(SimQuotaPublic(
                node=node.id, interface=iface.name, mcc_mnc=iface.mcc_mnc,
                operator=iface.operator_name, source=source,
                limit=quota.cap_bytes if quota else None,
                usable=quota.usable_bytes if quota else None,
                reset_day=quota.reset_day if quota else None,
                margin=quota.margin if quota else None,
                used=st.used, reserved=st.reserved,
                remaining=st.remaining if quota else None, overrun=st.overrun,
                period_start=st.period.start if st.period else None,
                period_end=st.period.end if st.period else None,
            ))
        for (node_id, name), row in sorted(rows.items()):
            if node_id == node.id and name not in seen:  # set before the agent reported it
                out.append(SimQuotaPublic(
                    node=node.id, interface=name, mcc_mnc=None, operator=None,
                    source="configured", limit=row.cap_bytes,
                    usable=Quota(sim_key(node.id, name, "?"), row.cap_bytes, row.reset_day,
                                 row.margin).usable_bytes,
                    reset_day=row.reset_day, margin=row.margin, used=0, reserved=0,
                    remaining=None, overrun=0, period_start=None, period_end=None))
    return out


def set_budget(ctx: Context, principal: Principal, project: str,
               body: BudgetUpdate) -> ProjectQuotaPublic:
    principal.require_admin()
    with ctx.db.session() as s:
        row = s.scalar(select(Project).where(Project.name == project))
        if row is None:
            raise NotFound(f"no project {project!r}; create it first (testbed project add)")
        row.budget_bytes = body.budget_bytes
    ctx.replan_wanted.set()
    return next(p for p in list_quotas(ctx).projects if p.project == project)


def quota_points(ctx: Context) -> list[Point]:
    """Every reported SIM's quota now, as ``quota`` points for the time-series store
    (the planner loop writes them after each pass: the quota dashboard's series)."""
    now = ctx.clock.now()
    with ctx.db.session() as s:
        countries = dict(s.execute(select(Node.id, Node.country)).tuples().all())
    return [
        quota_point(node=q.node, interface=q.interface, operator=q.mcc_mnc,
                    operator_name=q.operator or "", country=countries.get(q.node, ""),
                    used=q.used, reserved=q.reserved, limit=q.limit, at=now)
        for q in list_quotas(ctx).sims if q.mcc_mnc is not None
    ]
