"""The fleet page: every node's health and every SIM's data plan at a glance, for the
operator who keeps the probes measuring. From the state database (nodes, heartbeats,
the quota ledger), so it works without a time-series store. Pure: the API's own
views in, a :class:`~.views.Page` out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from orchestrator.model.durations import spoken
from orchestrator.pages.views import Page, Section, Table
from orchestrator.schemas import NodePublic, SimQuotaPublic

#: Health in this order: what needs a look comes first ("new": provisioned, its agent
#: never registered).
HEALTH_ORDER = ("offline", "stale", "new", "maintenance", "online")


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


def fleet_page(nodes: Sequence[NodePublic], sims: Sequence[SimQuotaPublic], *,
               now: datetime, unreachable: Mapping[str, int] | None = None) -> Page:
    """``unreachable``: per node, its runs out of contact (still awaiting bundles)."""
    held = unreachable or {}
    order = {h: i for i, h in enumerate(HEALTH_ORDER)}
    ranked = sorted(nodes, key=lambda n: (order.get(str(n.health), len(order)), n.id))
    counts: dict[str, int] = {}
    for n in nodes:
        counts[str(n.health)] = counts.get(str(n.health), 0) + 1
    summary = ", ".join(f"{counts[h]} {h}" for h in HEALTH_ORDER if h in counts)
    node_table = Table(
        caption=f"Nodes ({len(nodes)}: {summary or 'none'})",
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
        ) for n in ranked),
        css_class="nodes")
    sim_table = Table(
        caption="SIM data plans this period",
        headers=("Node", "SIM", "Operator", "Cap", "Used", "Reserved", "Used of cap",
                 "Remaining", "Overrun", "Resets"),
        rows=tuple((
            q.node, q.interface, f"{q.operator or '?'} ({q.mcc_mnc or '?'})",
            _bytes(q.limit) if q.source != "none" else "no cap: nothing is booked",
            _bytes(q.used), _bytes(q.reserved), _pct(q.used + q.reserved, q.limit),
            _bytes(q.remaining), _bytes(q.overrun) if q.overrun else "-",
            q.period_end.strftime("%Y-%m-%d") if q.period_end else "-",
        ) for q in sims),
        css_class="sims")
    return Page(
        "fleet", "Fleet health",
        "Nodes needing a look first (offline, stale, never registered, in maintenance), "
        "then the rest; a "
        "node is stale after a few missed heartbeats and offline after more; the runs it "
        "held then are unreachable, not failed, until it is back with their bundles. "
        "Each SIM's "
        "cap, what runs have used and reserved of it this period, and any overrun.",
        sections=(Section(heading="Nodes", tables=(node_table,)),
                  Section(heading="Data plans", tables=(sim_table,))),
        empty=None if nodes else "No nodes yet: add one with `testbed node add`.",
        filterable=False)
