"""Quotas against the database: SIM caps, project budgets, reservations, settlement.

The pure ledger (``orchestrator.quotas``) decides; this module feeds it state read
from the database and stores what it decides. The runs table is the ledger's journal:
each run carries its reservation (SIM, period, bytes; :func:`hold`) and, once
settled, what the settlement rule charged (:func:`settle`). Usage per SIM and period
is summed from it, so there is no second copy of the numbers to drift out of step,
and no second copy of the rule.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import NamedTuple, cast

from sqlalchemy import BigInteger, Table, and_, bindparam, case, func, literal, null, or_, select
from sqlalchemy.orm import Session, selectinload

from orchestrator.errors import Conflict, NotFound
from orchestrator.model.contact import took_up_for_settlement
from orchestrator.model.ids import NodeId
from orchestrator.quotas import settlement
from orchestrator.quotas.ledger import (
    JournalTotals,
    LedgerState,
    ProjectBudget,
    ProjectId,
    QuotaLedger,
    Refusal,
    Reservation,
    SimKey,
    Usage,
    period_start,
    usage_from_journal,
)
from orchestrator.quotas.ledger import SimQuota as Quota
from orchestrator.quotas.settlement import Settlement
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
from orchestrator.store.tables import (
    Interface,
    Node,
    Project,
    Run,
    RunEvent,
    SimQuota,
    UtcDateTime,
)
from orchestrator.timeseries.lineprotocol import Point
from orchestrator.timeseries.schema import quota_point
from testbed_common.states import RunState

log = logging.getLogger(__name__)

#: States in which a run has not moved a byte on its modem interface yet.
NOT_STARTED = (RunState.SCHEDULED, RunState.ASSIGNED, RunState.DEPLOYING)


def sim_key(node_id: str, interface: str, mcc_mnc: str) -> SimKey:
    return SimKey(NodeId(node_id), interface, mcc_mnc)


#: Up to this many nodes, their quota rows are looked up by node (a few nodes read their
#: own rows, not the fleet's 30,000); more, and the whole table is read once.
_BY_NODE_UP_TO = 100


#: A SIM's configured quota row: cap bytes, reset day, margin.
QuotaRow = tuple[int, int, float]
#: The quota rows of some nodes, by node and interface.
QuotaRows = dict[tuple[str, str], QuotaRow]


def _quota_rows(s: Session, nodes: Sequence[Node]) -> QuotaRows:
    """As plain columns: a page of a hundred nodes has 300 of them, read once for the
    ledger and the statuses together (ORM rows, twice, were a fifth of a fleet page's
    CPU)."""
    query = select(SimQuota.node_id, SimQuota.interface, SimQuota.cap_bytes,
                   SimQuota.reset_day, SimQuota.margin)
    if len(nodes) <= _BY_NODE_UP_TO:
        query = query.where(SimQuota.node_id.in_([n.id for n in nodes]))
    return {(node, iface): (cap, reset, margin)
            for node, iface, cap, reset, margin in s.execute(query)}


def _quotas(settings: Settings, nodes: Iterable[Node], rows: QuotaRows
            ) -> dict[SimKey, Quota]:
    out: dict[SimKey, Quota] = {}
    for node in nodes:
        for iface in node.interfaces:
            quota = _quota(settings, sim_key(node.id, iface.name, iface.mcc_mnc), node.timezone,
                           rows.get((node.id, iface.name)))
            if quota is not None:
                out[quota.sim] = quota
    return out


def _quota(settings: Settings, key: SimKey, timezone: str, row: QuotaRow | None
           ) -> Quota | None:
    """The SIM's quota: its configured row, else the default cap if there is one."""
    if row is not None:
        return Quota(key, row[0], row[1], row[2], timezone)
    default = settings.scheduling.default_sim_cap_bytes
    if default is None:
        return None
    return Quota(key, default, 1, settings.scheduling.quota_margin, timezone)


#: The runs that are the ledger's journal: those holding a reservation of a SIM's period.
_IN_JOURNAL = (Run.reserved_bytes.is_not(None), Run.mcc_mnc.is_not(None),
               Run.reservation_period.is_not(None))
#: Their sums (:class:`JournalTotals`): open reservations, charged, overrun.
_JOURNAL_SUMS = (func.sum(case((Run.settled_at.is_(None), Run.reserved_bytes), else_=0)),
                 func.sum(func.coalesce(Run.charged_bytes, 0)),
                 func.sum(func.coalesce(Run.overrun_bytes, 0)))


def ledger_state(s: Session, settings: Settings, nodes: Iterable[Node] | None = None,
                 *, usage_of_nodes_only: bool = False,
                 quota_rows: QuotaRows | None = None) -> LedgerState:
    """Caps, budgets and usage as the ledger's frozen state. Usage is the journal (the
    runs table) summed per SIM, period and project; the ledger turns the sums into
    usage (:func:`usage_from_journal`). ``usage_of_nodes_only``: only ``nodes``' runs
    are summed (their SIMs' figures are whole; the projects' are not)."""
    if nodes is None:
        nodes = s.scalars(select(Node)).all()
    nodes = list(nodes)
    only = ((Run.node_id.in_([n.id for n in nodes]),) if usage_of_nodes_only else ())
    rows = s.execute(
        select(Run.node_id, Run.interface, Run.mcc_mnc, Run.reservation_period, Project.name,
               *_JOURNAL_SUMS)
        .join(Project, Run.project_id == Project.id)
        .where(*_IN_JOURNAL, *only)
        .group_by(Run.node_id, Run.interface, Run.mcc_mnc, Run.reservation_period,
                  Project.name)
    ).all()
    sim_usage, project_usage = usage_from_journal(
        JournalTotals(sim_key(node_id, iface, mcc_mnc), period, ProjectId(project),
                      int(open_ or 0), int(charged or 0), int(over or 0))
        for node_id, iface, mcc_mnc, period, project, open_, charged, over in rows
    )
    budgets = {
        ProjectId(p.name): ProjectBudget(ProjectId(p.name), p.budget_bytes)
        for p in s.scalars(select(Project).where(Project.budget_bytes.is_not(None))).all()
        if p.budget_bytes is not None
    }
    configured = _quota_rows(s, nodes) if quota_rows is None else quota_rows
    return LedgerState(_quotas(settings, nodes, configured), budgets, sim_usage,
                       project_usage)


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


def hold(run: Run, reservation: Reservation) -> None:
    """Write a granted reservation (ad hoc or the planner's) onto its run: the journal
    entry that :func:`ledger_state` sums and :func:`settle` settles."""
    run.mcc_mnc = reservation.sim.mcc_mnc
    run.reserved_bytes = reservation.nbytes
    run.reservation_period = reservation.period_start


def reservation_of(s: Session, run: Run) -> Reservation | None:
    """The reservation a run holds, as the ledger knows it (None: booked before quotas)."""
    if run.reserved_bytes is None or run.mcc_mnc is None or run.reservation_period is None:
        return None
    project = s.get(Project, run.project_id)
    assert project is not None  # projects are never deleted
    return Reservation(sim_key(run.node_id, run.interface, run.mcc_mnc),
                       ProjectId(project.name), run.reservation_period, run.reserved_bytes,
                       f"run {run.id}")


def history_of(s: Session, run: Run) -> frozenset[RunState]:
    """Every state the run has been in: booked (``scheduled``, its creation), then its
    events."""
    return frozenset({RunState.SCHEDULED, *(RunState(x) for x in s.scalars(
        select(RunEvent.state).where(RunEvent.run_id == run.id)).all())})


def settle(s: Session, run: Run, *, at: datetime, target: RunState | None = None,
           by_node: bool = False, started: bool | None = None) -> Settlement | None:
    """Settle the run's reservation once, from its current state (and, for an
    ``unreachable`` run, the state it moves to and who moves it:
    :func:`orchestrator.model.contact.took_up_for_settlement`): the decision is the
    ledger's (:func:`orchestrator.quotas.settlement.settle`), this stores it. An overrun
    is recorded as an event and shows in the SIM's usage. None: nothing to settle.

    ``started`` overrides what the state says, for a cancelled run whose reservation was
    held (:func:`orchestrator.model.contact.cancel_holds_reservation`): its node's word
    that it dropped the run (False), or the horizon (True) settles it."""
    if run.settled_at is not None:
        return None
    reservation = reservation_of(s, run)
    if reservation is None:
        return None
    state = RunState(run.state)
    if started is None:
        started = state not in NOT_STARTED
        if state == RunState.UNREACHABLE:
            took_up = took_up_for_settlement(state, history=history_of(s, run),
                                             target=target or state, by_node=by_node)
            started = started if took_up is None else took_up
    done = settlement.settle(reservation, measured_bytes=run.measured_bytes,
                             started=started)
    run.charged_bytes = done.charged_bytes
    run.overrun_bytes = done.overrun_bytes
    run.settled_at = at
    note = done.overrun_note()
    if note is not None:
        log.warning("run %s: %s", run.id, note)
        s.add(RunEvent(run_id=run.id, state=run.state, reason=note, source="orchestrator",
                       at=at))
    return done


_RUNS = cast(Table, Run.__table__)
#: Per SIM and period of a node, the bytes charged to its settled runs and those
#: reserved by the runs not handed out yet: in Core, built once (it is read on every
#: heartbeat).
_SIM_SUMS = (
    select(_RUNS.c.interface, _RUNS.c.mcc_mnc, _RUNS.c.reservation_period,
           func.sum(case((_RUNS.c.settled_at.is_not(None), _RUNS.c.charged_bytes), else_=0)),
           func.sum(case((and_(_RUNS.c.settled_at.is_(None),
                               _RUNS.c.state == RunState.SCHEDULED.value),
                          _RUNS.c.reserved_bytes), else_=0)))
    .where(_RUNS.c.node_id == bindparam("b_node"),
           _RUNS.c.interface.in_(bindparam("b_ifaces", expanding=True)),
           _RUNS.c.reservation_period.in_(bindparam("b_periods", expanding=True)))
    .group_by(_RUNS.c.interface, _RUNS.c.mcc_mnc, _RUNS.c.reservation_period))


class NodeSim(NamedTuple):
    """One interface of a node as a heartbeat sees it: its SIM and its quota row."""

    interface: str
    mcc_mnc: str
    quota: QuotaRow | None


def sim_left_for_node(s: Session, settings: Settings, node_id: str, timezone: str,
                      sims: Sequence[NodeSim], now: datetime) -> dict[str, int]:
    """Per interface of the node with a cap, the bytes the node may still move on that
    SIM this period (``HeartbeatReply.sim_left_bytes``): the usable cap less what settled
    runs were charged, less the reservations of runs not handed to the node (still
    ``scheduled``, beyond the hand-out horizon). The reservations of the runs it holds
    are left in: those are what it will spend. The node keeps its local account from
    this while offline (``node_agent.sim_account``). ``sims`` are all the node's
    interfaces with their quota rows (the heartbeat reads them in one query); only this
    node's runs are summed: it is answered on every heartbeat."""
    quotas = {sim.interface: quota for sim in sims
              if (quota := _quota(settings, sim_key(node_id, sim.interface, sim.mcc_mnc),
                                  timezone, sim.quota))}
    if not quotas:
        return {}
    periods = {name: quota.period_at(now).start for name, quota in quotas.items()}
    # One query for all the node's SIMs (it was two per SIM, on every heartbeat).
    sums = {(iface, mcc_mnc, period): (int(charged or 0), int(waiting or 0))
            for iface, mcc_mnc, period, charged, waiting in s.execute(_SIM_SUMS, {
                "b_node": node_id, "b_ifaces": list(periods),
                "b_periods": list(set(periods.values()))})}
    out: dict[str, int] = {}
    for sim in sims:
        quota = quotas.get(sim.interface)
        if quota is None:
            continue
        charged, waiting = sums.get((sim.interface, sim.mcc_mnc, periods[sim.interface]),
                                    (0, 0))
        out[sim.interface] = max(0, quota.usable_bytes - charged - waiting)
    return out


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
        # Interfaces in one query, not one per node (every scrape of /metrics reads this)
        nodes = s.scalars(select(Node).options(selectinload(Node.interfaces))
                          .order_by(Node.id)).all()
        rows = _quota_rows(s, nodes)
        state = ledger_state(s, ctx.settings, nodes, quota_rows=rows)
        ledger = QuotaLedger(state)
        projects = [_project_public(p, ledger) for p in
                    s.scalars(select(Project).order_by(Project.name)).all()]
        return QuotasPublic(sims=_statuses(ctx, s, nodes, state, rows), projects=projects)


def sim_statuses(ctx: Context, s: Session, nodes: Sequence[Node]) -> list[SimQuotaPublic]:
    """The SIMs of these nodes only (loaded with their interfaces), as
    :func:`list_quotas` shows them: their runs alone are summed (a page of a hundred
    nodes, not the fleet's runs table)."""
    rows = _quota_rows(s, nodes)
    state = ledger_state(s, ctx.settings, nodes, usage_of_nodes_only=True, quota_rows=rows)
    return _statuses(ctx, s, nodes, state, rows)


class SimFigure(NamedTuple):
    """One reported SIM's cap and what its runs hold of it this period, as
    :func:`list_quotas` lists it (``limit``, ``used``, ``reserved``, ``overrun``;
    ``capped``: its source is not "none"; without a cap nothing is booked, so its sums
    are 0)."""

    node: str
    interface: str
    mcc_mnc: str
    operator: str
    capped: bool
    limit: int | None
    used: int
    reserved: int
    overrun: int


class SimCount(NamedTuple):
    """The fleet's SIMs: how many, and the figures of those that may need a look (no
    cap, 79 % of the cap used or more, an overrun); the others are in no class of
    :func:`orchestrator.model.fleet.sim_classes`."""

    total: int
    to_look_at: list[SimFigure]


#: The share of its cap a SIM's use must reach to be read back by :func:`sim_count`:
#: below the near-cap class's 80 %, so that the database's integer comparison keeps
#: every SIM the exact one (:func:`orchestrator.model.fleet.sim_classes`) may class.
_LOOK_FROM_PERCENT = 79


def _sim_figures(s: Session, settings: Settings, now: datetime, *, to_look_at: bool
                 ) -> list[SimFigure]:
    """Every reported SIM's figures at ``now``, as :func:`list_quotas` has them, or
    (``to_look_at``) only those of the SIMs that may need a look. The database joins the
    caps, the interfaces and the current periods' sums, and returns one row per SIM: at
    10,000 nodes, building the listing's 30,000 entries in the API's process took 5.6 s
    of CPU, holding the interpreter's lock that the heartbeats beside it need
    (bench/load-RESULTS.md, bench/metrics-RESULTS.md). Each SIM's period starts at its
    reset day's local midnight: computed here once per reset day and time zone, then
    matched by the database."""
    default = settings.scheduling.default_sim_cap_bytes
    reset = func.coalesce(SimQuota.reset_day, 1)
    zone = case((func.coalesce(Node.timezone, "") == "", "UTC"), else_=Node.timezone)
    cap = case((SimQuota.node_id.is_not(None), SimQuota.cap_bytes),
               else_=literal(default, BigInteger))
    sims = (select(Interface.node_id, Interface.name, Interface.mcc_mnc)
            .join(Node, Node.id == Interface.node_id)
            .outerjoin(SimQuota, and_(SimQuota.node_id == Interface.node_id,
                                      SimQuota.interface == Interface.name)))
    starts = {(r, z): period_start(now, reset_day=r, timezone=z)
              for r, z in s.execute(sims.with_only_columns(reset, zone).distinct()
                                    .where(cap.is_not(None)))}
    period = (case(*((and_(reset == r, zone == z), literal(start, UtcDateTime()))
                     for (r, z), start in starts.items()), else_=None)
              if starts else null())
    used = (select(Run.node_id, Run.interface, Run.mcc_mnc, Run.reservation_period,
                   *(total.label(name) for total, name
                     in zip(_JOURNAL_SUMS, ("open", "charged", "over"), strict=True)))
            .where(*_IN_JOURNAL, Run.reservation_period.in_(set(starts.values())))
            .group_by(Run.node_id, Run.interface, Run.mcc_mnc, Run.reservation_period)
            .subquery())
    charged = func.coalesce(used.c.charged, 0)
    reserved = func.coalesce(used.c.open, 0)
    over = func.coalesce(used.c.over, 0)
    query = (sims.with_only_columns(Interface.node_id, Interface.name, Interface.mcc_mnc,
                                    Interface.operator_name, cap, charged, reserved, over)
             .outerjoin(used, and_(used.c.node_id == Interface.node_id,
                                   used.c.interface == Interface.name,
                                   used.c.mcc_mnc == Interface.mcc_mnc,
                                   used.c.reservation_period == period,
                                   cap.is_not(None))))  # without a cap, nothing is used
    if to_look_at:
        query = query.where(or_(cap.is_(None), over != 0,
                                and_(cap != 0, charged * 100 >= cap * _LOOK_FROM_PERCENT)))
    return [SimFigure(node, iface, mcc_mnc, operator, limit is not None, limit,
                      int(c or 0), int(r or 0), int(o or 0))
            for node, iface, mcc_mnc, operator, limit, c, r, o in s.execute(query)]


def sim_figures(ctx: Context) -> list[SimFigure]:
    """Every reported SIM's cap and sums this period, as :func:`list_quotas` has them,
    summed by the database (:func:`_sim_figures`): what the metrics collector's per-SIM
    series and the planner's quota points show, at every scrape and pass. A quota set
    for an interface the agent has not reported yet is not among them."""
    with ctx.db.reading() as s:
        return _sim_figures(s, ctx.settings, ctx.clock.now(), to_look_at=False)


def sim_count(ctx: Context) -> SimCount:
    """The fleet's SIMs counted, and the figures of those that may need a look, as
    :func:`list_quotas` has them (:func:`_sim_figures`; only the SIMs that may need a
    look are read back: at 10,000 nodes, all 30,000 rows cost the API's process
    0.35-0.7 s of CPU, every 30 s in each worker)."""
    with ctx.db.reading() as s:
        looked = _sim_figures(s, ctx.settings, ctx.clock.now(), to_look_at=True)
        reported = select(Interface.node_id).where(Interface.node_id == SimQuota.node_id,
                                                   Interface.name == SimQuota.interface)
        total = (s.scalar(select(func.count()).select_from(Interface)) or 0) + (s.scalar(
            select(func.count()).select_from(SimQuota).where(~reported.exists())) or 0)
    # A quota set before the agent reported its interface counts (capped, nothing used)
    # but is in no class.
    return SimCount(total, looked)


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
              state: LedgerState | None = None, rows: QuotaRows | None = None
              ) -> list[SimQuotaPublic]:
    nodes = list(nodes)
    rows = _quota_rows(s, nodes) if rows is None else rows
    state = state or ledger_state(s, ctx.settings, nodes, quota_rows=rows)
    ledger = QuotaLedger(state)
    now = ctx.clock.now()
    # Quotas set before the agent reported the interface, by node: one pass over the
    # rows, not one per node (10,000 nodes x 30,000 rows was a minute per fleet page).
    unreported: dict[str, list[tuple[str, QuotaRow]]] = defaultdict(list)
    for (node_id, name), row in sorted(rows.items()):
        unreported[node_id].append((name, row))
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
        for name, row in unreported.get(node.id, ()):
            if name not in seen:  # set before the agent reported it
                cap, reset, margin = row
                out.append(SimQuotaPublic(
                    node=node.id, interface=name, mcc_mnc=None, operator=None,
                    source="configured", limit=cap,
                    usable=Quota(sim_key(node.id, name, "?"), cap, reset, margin).usable_bytes,
                    reset_day=reset, margin=margin, used=0, reserved=0,
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
        s.flush()
        # This project's runs summed, not the whole listing (every node's SIMs)
        open_, charged, over = s.execute(
            select(*_JOURNAL_SUMS).where(Run.project_id == row.id, *_IN_JOURNAL)).one()
        name = ProjectId(row.name)
        ledger = QuotaLedger(LedgerState(
            projects={} if row.budget_bytes is None else {
                name: ProjectBudget(name, row.budget_bytes)},
            project_usage={name: Usage(int(charged or 0), int(open_ or 0), int(over or 0))}))
        public = _project_public(row, ledger)
    ctx.replan_wanted.set()
    return public


def _project_public(project: Project, ledger: QuotaLedger) -> ProjectQuotaPublic:
    """A project's budget and what its runs hold of it, as the ledger has them."""
    st = ledger.project_status(ProjectId(project.name))
    return ProjectQuotaPublic(
        project=project.name, limit=project.budget_bytes, used=st.used,
        reserved=st.reserved,
        remaining=st.remaining if project.budget_bytes is not None else None,
        overrun=st.overrun)


def quota_points(ctx: Context) -> list[Point]:
    """Every reported SIM's quota now, as ``quota`` points for the time-series store
    (the planner loop writes them after each pass: the quota dashboard's series),
    from the database's sums (:func:`sim_figures`)."""
    now = ctx.clock.now()
    with ctx.db.reading() as s:
        countries = {nid: c for nid, c in s.execute(select(Node.id, Node.country))}
    return [
        quota_point(node=f.node, interface=f.interface, operator=f.mcc_mnc,
                    operator_name=f.operator, country=countries.get(f.node, ""),
                    used=f.used, reserved=f.reserved, limit=f.limit, at=now)
        for f in sim_figures(ctx)
    ]
