"""The fleet page's reads, sized for 10,000 nodes: the whole fleet counted from three
columns of each node and from the SIM figures (cached), and only the shown page's nodes
read in full.

The SIM figures (:func:`orchestrator.services.quotas.sim_figures`: the caps and the
runs table summed per SIM for the current periods) cost about half a second at 10,000
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
    FleetQuery,
    FleetSelection,
    SimSummary,
    health_counts,
    select_nodes,
    sim_classes,
    summarise_sims,
)
from orchestrator.schemas import NodePublic, SimQuotaPublic
from orchestrator.services.context import Context
from orchestrator.services.quotas import sim_figures, sim_statuses
from orchestrator.services.views import NodeHealthRow, health_of, node_public
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
    return summarise_sims(
        ((f.node, sim_classes(capped=f.capped, limit=f.limit, used=f.used,
                              overrun=f.overrun)) for f in sim_figures(ctx)),
        ctx.clock.now())


def fleet_view(ctx: Context, query: FleetQuery) -> FleetView:
    """The summary from the whole fleet (SIM figures as cached), the shown page's nodes
    and SIMs read now."""
    now = ctx.clock.now()
    sims = ctx.fleet_sims.get(lambda: _sim_summary(ctx))
    with ctx.db.session() as s:
        # Health from three columns of each node, not 10,000 nodes with their interfaces
        health = {r.id: str(health_of(r, now, ctx.settings.health)) for r in (
            NodeHealthRow(*row) for row in s.execute(
                select(Node.id, Node.last_heartbeat_at, Node.maintenance)))}
        selection = select_nodes(health, sims.of_node, query)
        shown = list(selection.shown)
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
        query=query, health=health_counts(health.values()), sims=sims,
        selection=selection, nodes=nodes,
        node_sims=node_sims, unreachable=unreachable)
