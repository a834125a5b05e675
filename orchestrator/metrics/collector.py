"""A collector over the database: what Prometheus scrapes, and what the alert rules in
``deploy/prometheus/rules/`` read (docs/monitoring.md lists every series and alert).

Values are computed when Prometheus scrapes, so they are never out of step with the
state they describe, and several orchestrator replicas report the same numbers.

Two views. The public one holds fleet aggregates only: nodes by health, runs by state,
runs ended in the last hour by operator and final state, upload and archive bytes, the
archive disk, and the ingest backlog. The full one (a scraper with the metrics token)
adds series labelled with node ids: per node its health, heartbeat age, clock offset,
free disk and spooled bundles (5 series), and per SIM its quota (used, reserved, limit,
overrun: 4, 3 without a cap). That is 17 series for a node with three SIMs, 170,000 at
10,000 nodes: cardinality grows with the fleet only, never with runs or time, because
no label holds a run, a campaign or a timestamp.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from orchestrator.metrics.contrib import study_families
from orchestrator.metrics.exposition import GaugeText, encode, label_set
from orchestrator.model.fleet import HEALTH_ORDER
from orchestrator.services.context import Context
from orchestrator.services.quotas import SimFigure, sim_figures
from orchestrator.services.views import health_of
from orchestrator.store.health import health_rank_sql
from orchestrator.store.tables import Bundle, Node, Run, Upload
from testbed_common.states import FINAL_STATES, NodeHealth, RunState

#: The window of ``testbed_runs_ended``, seconds. An hour holds enough runs per operator
#: for a failure rate to mean something (a fleet runs each SIM every few minutes to
#: hourly), and counting a window rather than all history keeps a scrape's query on an
#: index range (ix_runs_state_at) however many months of runs the store holds.
ENDED_WINDOW_S = 3600.0
#: The label of runs booked without an operator (before quotas existed).
UNKNOWN_OPERATOR = "unknown"


class StateCollector(Collector):
    """``per_sim``: the full view, with the per-node and per-SIM series labelled with
    node ids (shown only to a scraper with the metrics token; the fleet aggregates are
    public).

    :meth:`exposition` is the body ``/metrics`` serves. :meth:`collect` yields the
    fleet aggregates alone, as prometheus_client families (for a registry): the
    per-node and per-SIM families are written as text by :meth:`exposition`, 170,000
    samples at 10,000 nodes that prometheus_client's objects would cost a worker
    most of a second of CPU per scrape (:mod:`orchestrator.metrics.exposition`)."""

    def __init__(self, ctx: Context, *, per_sim: bool = True) -> None:
        self.ctx = ctx
        self.per_sim = per_sim

    def collect(self) -> Iterator[Metric]:
        yield from self._aggregates(self._read())
        yield from study_families()

    def exposition(self) -> bytes:
        """What Prometheus scrapes: the aggregates and the installed studies' series
        (:mod:`.contrib`), then (full view) each node's and each SIM's series, all read
        in one scrape's queries."""
        state = self._read()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families([*self._aggregates(state), *study_families()]))
        body = generate_latest(registry)
        if self.per_sim:
            body += encode([*_nodes(state.nodes, state.now), *_quotas(state.sims)])
        return body

    def _read(self) -> _State:
        now = self.ctx.clock.now()
        with self.ctx.db.reading() as s:
            nodes: list[tuple[_NodeFigures, NodeHealth]] = []
            if self.per_sim:  # each node's series: its columns, not 10,000 ORM rows
                nodes = [(n, health_of(n, now, self.ctx.settings.health)) for n in (
                    _NodeFigures(*row) for row in s.execute(select(*_NODE_COLUMNS)))]
                health = Counter(h for _, h in nodes)
            else:  # the aggregate alone: counted by the database (store.health)
                rank = health_rank_sql(now, self.ctx.settings.health)
                health = Counter({NodeHealth(HEALTH_ORDER[r]): int(count) for r, count
                                  in s.execute(select(rank, func.count()).group_by(rank))})
            runs = dict(s.execute(select(Run.state, func.count()).group_by(Run.state)).all())
            received = s.scalar(select(func.coalesce(func.sum(Upload.bytes_received), 0)))
            archived = s.scalar(select(func.coalesce(func.sum(Bundle.size), 0)))
            ended = _ended(s, since=now - timedelta(seconds=ENDED_WINDOW_S))
            pending = _ingest_backlog(s) if self.ctx.settings.influx.url else None
        # Summed by the database, one row per SIM (quotas.sim_figures): the listing's
        # objects cost 5.6 s of a worker's CPU per scrape at 10,000 nodes.
        sims = sim_figures(self.ctx) if self.per_sim else []
        return _State(now=now, health=health, runs=runs, received=received or 0,
                      archived=archived or 0, ended=ended, pending=pending, nodes=nodes,
                      sims=sims)

    def _aggregates(self, state: _State) -> Iterator[Metric]:
        g = GaugeMetricFamily("testbed_nodes", "Nodes by health", labels=["health"])
        for h in NodeHealth:
            g.add_metric([h.value], state.health.get(h, 0))
        yield g
        r = GaugeMetricFamily("testbed_runs", "Runs by state", labels=["state"])
        for st in RunState:
            r.add_metric([st.value], state.runs.get(st.value, 0))
        yield r
        e = GaugeMetricFamily(
            "testbed_runs_ended",
            f"Runs that reached a final state in the last {ENDED_WINDOW_S:.0f} s, by "
            "operator (MCC-MNC) and state", labels=["mcc_mnc", "state"])
        for (operator, state_), count in sorted(state.ended.items()):
            e.add_metric([operator, state_], count)
        yield e
        yield CounterMetricFamily(
            "testbed_upload_bytes", "Bundle bytes received from nodes", value=state.received)
        yield GaugeMetricFamily(
            "testbed_archive_bytes", "Bytes of bundles in the raw archive",
            value=state.archived)
        yield from self._archive_disk()
        if state.pending is not None:
            count, oldest = state.pending
            yield GaugeMetricFamily(
                "testbed_ingest_pending_runs",
                "Archived runs not yet written to the time-series store", value=count)
            yield GaugeMetricFamily(
                "testbed_ingest_oldest_pending_age_seconds",
                "How long the oldest archived run has waited for the time-series store "
                "(0: none waits)",
                value=(state.now - oldest).total_seconds() if oldest is not None else 0.0)

    def _archive_disk(self) -> Iterator[Metric]:
        """The file system of the raw archive: uploads get 507 when it is full (the
        nodes keep their bundles spooled meanwhile). Absent until the archive folder
        exists."""
        try:
            usage = shutil.disk_usage(self.ctx.archive.root)
        except OSError:
            return
        yield GaugeMetricFamily(
            "testbed_archive_disk_free_bytes",
            "Free bytes on the raw archive's file system (for unprivileged users)",
            value=usage.free)
        yield GaugeMetricFamily(
            "testbed_archive_disk_size_bytes",
            "Size of the raw archive's file system, bytes", value=usage.total)


class _Families(Collector):
    """Families already built, for a one-scrape registry."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


@dataclass(frozen=True)
class _State:
    """What one scrape read."""

    now: datetime
    health: Counter[NodeHealth]
    runs: dict[str, int]
    received: int
    archived: int
    ended: dict[tuple[str, str], int]
    pending: tuple[int, datetime | None] | None
    nodes: list[tuple[_NodeFigures, NodeHealth]]
    sims: list[SimFigure]


def _quotas(sims: Iterable[SimFigure]) -> list[GaugeText]:
    """Four series per SIM (three without a cap), labelled by node, interface and
    operator."""
    used, reserved, limit, overrun = (
        GaugeText(f"testbed_quota_{key}_bytes", text) for key, text in (
            ("used", "Bytes charged to the SIM this period (settled runs)"),
            ("reserved", "Bytes reserved on the SIM this period (booked runs)"),
            ("limit", "The SIM's monthly cap (absent: no cap, nothing is booked)"),
            ("overrun", "Bytes measured beyond the runs' reservations this period")))
    for f in sims:
        labels = label_set((("interface", f.interface), ("mcc_mnc", f.mcc_mnc),
                            ("node", f.node)))
        used.add(labels, f.used)
        reserved.add(labels, f.reserved)
        overrun.add(labels, f.overrun)
        if f.limit is not None:
            limit.add(labels, f.limit)
    return [used, reserved, limit, overrun]


def _ended(s: Session, *, since: datetime) -> dict[tuple[str, str], int]:
    """Runs that reached a final state at ``since`` or later, by (operator, state).
    Every operator seen gets every final state, zero included, so that a rule's ratio
    of failed to all has both sides."""
    rows = s.execute(
        select(Run.mcc_mnc, Run.state, func.count())
        .where(Run.state.in_([st.value for st in FINAL_STATES]), Run.state_at >= since)
        .group_by(Run.mcc_mnc, Run.state)
    ).all()
    out = {(op or UNKNOWN_OPERATOR, st.value): 0
           for op in {r[0] for r in rows} for st in FINAL_STATES}
    for operator, state, count in rows:
        out[(operator or UNKNOWN_OPERATOR, state)] += count
    return out


def _ingest_backlog(s: Session) -> tuple[int, datetime | None]:
    """Archived runs waiting for the time-series store, and when the oldest one's
    bundle was archived (services.ingest picks these up)."""
    count, oldest = s.execute(
        select(func.count(), func.min(Bundle.stored_at))
        .select_from(Run).join(Bundle, Run.bundle_sha256 == Bundle.sha256)
        .where(Run.ingested_at.is_(None))
    ).one()
    return int(count), oldest


class _NodeFigures(NamedTuple):
    """A node's columns its series show (and its health is judged from)."""

    id: str
    last_heartbeat_at: datetime | None
    maintenance: bool
    clock_offset_s: float | None
    disk_free_bytes: int | None
    spooled_bundles: int


_NODE_COLUMNS = (Node.id, Node.last_heartbeat_at, Node.maintenance, Node.clock_offset_s,
                 Node.disk_free_bytes, Node.spooled_bundles)


def _nodes(nodes: Sequence[tuple[_NodeFigures, NodeHealth]],
           now: datetime) -> list[GaugeText]:
    """Five series per node, from its last heartbeat. Health is one series whose
    ``health`` label is the current one (value 1), not one series per possible state:
    a fifth of the series at 10,000 nodes; a change of health starts a new series,
    which health changes are rare enough to afford."""
    health = GaugeText(
        "testbed_node_health", "1 for the node's current health (new, online, stale, "
        "offline, maintenance), derived from its last heartbeat as the API shows it")
    age = GaugeText(
        "testbed_node_heartbeat_age_seconds",
        "Seconds since the node's last heartbeat (absent: never heartbeated)")
    offset = GaugeText(
        "testbed_node_clock_offset_seconds",
        "Node clock minus orchestrator clock, seconds, as the agent last estimated it")
    disk = GaugeText(
        "testbed_node_disk_free_bytes",
        "Free bytes where the agent keeps its spool, as last reported")
    spooled = GaugeText(
        "testbed_node_spooled_bundles",
        "Result bundles waiting on the node for upload, as last reported")
    for n, h in nodes:
        node = label_set((("node", n.id),))
        health.add(label_set((("health", h.value), ("node", n.id))), 1)
        if n.last_heartbeat_at is not None:
            age.add(node, max(0.0, (now - n.last_heartbeat_at).total_seconds()))
        if n.clock_offset_s is not None:
            offset.add(node, n.clock_offset_s)
        if n.disk_free_bytes is not None:
            disk.add(node, n.disk_free_bytes)
        spooled.add(node, n.spooled_bundles)
    return [health, age, offset, disk, spooled]
