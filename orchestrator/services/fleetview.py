"""The fleet page's reads, sized for 10,000 nodes: the whole fleet counted and paged by
the database (node health as SQL) and from the SIM figures (cached), and only the shown
page's nodes read in full.

The SIM counts (:func:`orchestrator.services.quotas.sim_count`: the caps and the runs
table summed per SIM for the current periods, by the database, which returns only the
SIMs that may need a look) cost about half a second of the database's time at 10,000
nodes and 30 days of runs; twenty people reading the page would ask for them several
times a second.
Each process keeps them counted for ``SIM_FIGURES_S`` (:mod:`.context`; the page says
how old they are), as a dashboard's panel refreshes: a SIM's use moves by a run's bytes
at a time, and the planner and the API read the ledger afresh for every decision. The
shown page's SIMs are summed afresh on every load (a hundred nodes' runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import selectinload

from orchestrator.model.fleet import (
    HEALTH_ORDER,
    PAGE_SIZE,
    FleetQuery,
    FleetSelection,
    SimSummary,
    page_of,
    sim_classes,
    summarise_sims,
)
from orchestrator.schemas import NodePublic, SimQuotaPublic
from orchestrator.services.context import Context
from orchestrator.services.quotas import sim_count, sim_statuses
from orchestrator.services.views import node_public
from orchestrator.store.health import health_rank_sql
from orchestrator.store.tables import Node, Run
from testbed_common.states import RunState


@dataclass(frozen=True)
class FleetView:
    """What the fleet page is built from: the whole fleet counted, and the shown page's
    nodes and SIMs in full."""

    query: FleetQuery
    health: Mapping[str, int]  # nodes by health, whole fleet
    sims: SimSummary  # whole fleet, as of when it was summed (it is cached)
    selection: FleetSelection
    nodes: Sequence[NodePublic]  # the shown page's, in its order
    node_sims: Sequence[SimQuotaPublic]  # the shown nodes' SIMs
    unreachable: Mapping[str, int]  # per node, its runs out of contact


def classes_of(q: SimQuotaPublic) -> frozenset[str]:
    return sim_classes(capped=q.source != "none", limit=q.limit, used=q.used,
                       overrun=q.overrun)


def _sim_summary(ctx: Context) -> SimSummary:
    counted = sim_count(ctx)
    return summarise_sims(
        ((f.node, sim_classes(capped=f.capped, limit=f.limit, used=f.used,
                              overrun=f.overrun)) for f in counted.to_look_at),
        ctx.clock.now(), total=counted.total)


def fleet_view(ctx: Context, query: FleetQuery) -> FleetView:
    """The summary from the whole fleet (SIM figures as cached), the shown page's nodes
    and SIMs read now. Health is judged, counted, ordered and paged by the database
    (10,000 nodes), the node filter matched there too; a ``sims`` filter takes the
    matching ids and keeps those with such a SIM."""
    now = ctx.clock.now()
    sims = ctx.fleet_sims.get(lambda: _sim_summary(ctx))
    rank = health_rank_sql(now, ctx.settings.health)
    where = []
    if query.health is not None:
        where.append(rank == HEALTH_ORDER.index(query.health))
    if query.node:
        where.append(func.lower(Node.id).contains(query.node.lower(), autoescape=True))
    ranked = select(Node.id).where(*where).order_by(rank, Node.id)
    with ctx.db.session() as s:
        counts = {HEALTH_ORDER[r]: int(n) for r, n in s.execute(
            select(rank, func.count()).group_by(rank))}
        if query.sims is None:
            matched = s.scalar(select(func.count()).select_from(Node).where(*where)) or 0
            first, pages = page_of(matched, query.page)
            shown = list(s.scalars(ranked.offset(first).limit(PAGE_SIZE)))
        else:
            ids = [nid for nid in s.scalars(ranked)
                   if query.sims in sims.of_node.get(nid, frozenset())]
            matched = len(ids)
            first, pages = page_of(matched, query.page)
            shown = ids[first:first + PAGE_SIZE]
        found = {n.id: n for n in s.scalars(
            select(Node).options(selectinload(Node.interfaces)).where(Node.id.in_(shown)))}
        rows = [found[nid] for nid in shown if nid in found]
        nodes = [node_public(n, now, ctx.settings.health) for n in rows]
        unreachable = {nid: int(n) for nid, n in s.execute(
            select(Run.node_id, func.count())
            .where(Run.state == RunState.UNREACHABLE, Run.node_id.in_(shown))
            .group_by(Run.node_id))}
        # The shown nodes' SIMs summed now (a hundred nodes' runs), so a cap just set or
        # a node just added shows at once; only the counts above may be SIM_FIGURES_S old.
        node_sims = [q for q in sim_statuses(ctx, s, rows)
                     if query.sims is None or query.sims in classes_of(q)]
    return FleetView(
        query=query, health=counts, sims=sims,
        selection=FleetSelection(matched, tuple(shown), pages), nodes=nodes,
        node_sims=node_sims, unreachable=unreachable)
