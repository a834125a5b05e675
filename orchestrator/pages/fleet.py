"""The fleet page: the fleet's health and its SIMs' data plans at a glance, for the
operator who keeps the probes measuring. From the state database (nodes, heartbeats,
the quota ledger), so it works without a time-series store. Pure: the fleet's view
(:class:`~orchestrator.services.fleetview.FleetView`) in, a :class:`~.views.Page` out.

At 10,000 nodes a table of every node and every SIM is 40,000 rows (several MB, seconds
to build for each reader): the page opens with a summary of the whole fleet (nodes by
health, SIMs near, at or over their cap), then shows one page of nodes at a time, those
needing a look first, narrowed by filters (``?health=``, ``?node=``, ``?sims=``) that
the summary links to (:mod:`orchestrator.model.fleet` decides which)."""

from __future__ import annotations

from datetime import datetime

from orchestrator.model.durations import spoken
from orchestrator.model.fleet import HEALTH_ORDER, PAGE_SIZE, SIM_CLASSES, FleetQuery
from orchestrator.pages.views import Link, Page, Section, Table
from orchestrator.schemas import NodePublic
from orchestrator.services.fleetview import FleetView


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _ago(then: datetime | None, now: datetime) -> str:
    if then is None:
        return "never"
    return f"{spoken((now - then).total_seconds())} ago"


def _pct(used: int, limit: int | None) -> str:
    return f"{100 * used / limit:.0f}%" if limit else "-"


def modems_cell(n: NodePublic) -> str:
    """The node's modems: how many, and each model (pure). Models repeat in a count:
    "3 modems: 2x Quectel EM12-G, Sierra Wireless EM7565"."""
    models: dict[str, int] = {}
    for i in n.interfaces:
        name = i.modem_model or "model unknown"
        models[name] = models.get(name, 0) + 1
    if not models:
        return "-"
    count = len(n.interfaces)
    listed = ", ".join(m if k == 1 else f"{k}x {m}" for m, k in sorted(models.items()))
    return f"{count} modem{'s' if count != 1 else ''}: {listed}"


def unavailable_cell(n: NodePublic) -> str:
    """What metadata the node cannot read: "gps: unavailable (cannot reach gpsd ...)"."""
    return "; ".join(f"{what}: unavailable ({why})"
                     for what, why in sorted(n.metadata_unavailable.items())) or "-"


def _summary(v: FleetView, now: datetime) -> Section:
    total = sum(v.health.values())
    nodes = ", ".join(f"{v.health[h]} {h}" for h in HEALTH_ORDER if v.health.get(h))
    links = [Link(f"/pages/fleet?{FleetQuery(health=h).query_string()}",
                  f"{v.health[h]} {h}", "show them")
             for h in HEALTH_ORDER if v.health.get(h) and h != "online"]
    links += [Link(f"/pages/fleet?{FleetQuery(sims=c).query_string()}",
                   f"{v.sims.counts[c]} SIMs {c}", SIM_CLASSES[c])
              for c in SIM_CLASSES if v.sims.counts.get(c)]
    table = Table(
        caption=f"Nodes ({total}: {nodes or 'none'})",
        headers=("Health", "Nodes"),
        rows=tuple((h, str(v.health.get(h, 0))) for h in HEALTH_ORDER),
        css_class="health")
    sim_table = Table(
        caption=f"SIMs ({v.sims.total}; figures of {_ago(v.sims.at, now)})",
        headers=("SIMs", "Count"),
        rows=tuple((f"{c}: {SIM_CLASSES[c]}", str(v.sims.counts.get(c, 0)))
                   for c in SIM_CLASSES),
        css_class="sim-summary")
    return Section(heading="Summary", tables=(table, sim_table), links=tuple(links))


def _paging(v: FleetView) -> tuple[Link, ...]:
    q, sel = v.query, v.selection
    out = []
    if q.page > 1:
        out.append(Link(f"/pages/fleet?{q.query_string(page=min(q.page - 1, sel.pages))}",
                        "Previous page"))
    if q.page < sel.pages:
        out.append(Link(f"/pages/fleet?{q.query_string(page=q.page + 1)}", "Next page"))
    if q != FleetQuery():
        out.append(Link("/pages/fleet", "Whole fleet", "no filter"))
    return tuple(out)


def fleet_page(v: FleetView, *, now: datetime) -> Page:
    held = v.unreachable
    sel = v.selection
    first = (v.query.page - 1) * PAGE_SIZE
    shown = (f"{first + 1}-{first + len(sel.shown)} of {sel.matched}" if sel.shown
             else f"none of {sel.matched}")
    node_table = Table(
        caption=f"Nodes: {v.query.describe()}, {shown} (page {v.query.page} of {sel.pages})",
        headers=("Node", "Health", "Last heartbeat", "Country", "Model", "Architecture",
                 "Agent", "Modems", "SIMs", "Metadata missing", "Clock offset (s)",
                 "Free disk", "Bundles waiting", "Runs unreachable"),
        rows=tuple((
            n.id, str(n.health), _ago(n.last_heartbeat_at, now), n.country, n.model,
            n.architecture, n.agent_version or "-", modems_cell(n),
            ", ".join(f"{i.name} {i.operator} ({i.mcc_mnc}){'' if i.up else ' down'}"
                      for i in n.interfaces) or "-",
            unavailable_cell(n),
            f"{n.clock_offset_s:.3f}" if n.clock_offset_s is not None else "-",
            _bytes(n.disk_free_bytes), str(n.spooled_bundles), str(held.get(n.id, 0)),
        ) for n in v.nodes),
        css_class="nodes")
    sim_table = Table(
        caption="SIM data plans this period, of the nodes above",
        headers=("Node", "SIM", "Operator", "Cap", "Used", "Reserved", "Used of cap",
                 "Remaining", "Overrun", "Resets"),
        rows=tuple((
            q.node, q.interface, f"{q.operator or '?'} ({q.mcc_mnc or '?'})",
            _bytes(q.limit) if q.source != "none" else "no cap: nothing is booked",
            _bytes(q.used), _bytes(q.reserved), _pct(q.used + q.reserved, q.limit),
            _bytes(q.remaining), _bytes(q.overrun) if q.overrun else "-",
            q.period_end.strftime("%Y-%m-%d") if q.period_end else "-",
        ) for q in v.node_sims),
        css_class="sims")
    return Page(
        "fleet", "Fleet health",
        "The whole fleet counted first: nodes by health, SIMs near, at or over their cap "
        "(each count links to those nodes). Then the nodes, those needing a look first "
        "(offline, stale, never registered, in maintenance), a page at a time; a "
        "node is stale after a few missed heartbeats and offline after more; the runs it "
        "held then are unreachable, not failed, until it is back with their bundles. "
        "Each shown node's SIMs: the cap, what runs have used and reserved of it this "
        "period, and any overrun. Filters: ?health=, ?node= (part of the id), ?sims=.",
        sections=(_summary(v, now),
                  Section(heading="Nodes", tables=(node_table,), links=_paging(v)),
                  Section(heading="Data plans", tables=(sim_table,))),
        empty=None if v.health else "No nodes yet: add one with `testbed node add`.",
        filterable=False)
