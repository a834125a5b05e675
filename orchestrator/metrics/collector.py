"""A collector over the database: nodes by health, runs by state, upload bytes, and
each SIM's quota this period (used, reserved, limit).

Values are computed when Prometheus scrapes, so they are never out of step with the
state they describe, and several orchestrator replicas report the same numbers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from orchestrator.services.context import Context
from orchestrator.services.quotas import list_quotas
from orchestrator.services.views import health_of
from orchestrator.store.tables import Bundle, Node, Run, Upload
from testbed_common.states import NodeHealth, RunState


class StateCollector(Collector):
    """``per_sim``: also the quota series per SIM, labelled with node ids (shown only to
    a scraper with the metrics token; the fleet aggregates are public)."""

    def __init__(self, ctx: Context, *, per_sim: bool = True) -> None:
        self.ctx = ctx
        self.per_sim = per_sim

    def collect(self) -> Iterator[Metric]:
        now = self.ctx.clock.now()
        with self.ctx.db.session() as s:
            nodes = s.scalars(select(Node)).all()
            health = Counter(health_of(n, now, self.ctx.settings.health) for n in nodes)
            runs = dict(s.execute(select(Run.state, func.count()).group_by(Run.state)).all())
            received = s.scalar(select(func.coalesce(func.sum(Upload.bytes_received), 0)))
            archived = s.scalar(select(func.coalesce(func.sum(Bundle.size), 0)))
        g = GaugeMetricFamily("testbed_nodes", "Nodes by health", labels=["health"])
        for h in NodeHealth:
            g.add_metric([h.value], health.get(h, 0))
        yield g
        r = GaugeMetricFamily("testbed_runs", "Runs by state", labels=["state"])
        for st in RunState:
            r.add_metric([st.value], runs.get(st.value, 0))
        yield r
        yield CounterMetricFamily(
            "testbed_upload_bytes", "Bundle bytes received from nodes", value=received or 0
        )
        yield GaugeMetricFamily(
            "testbed_archive_bytes", "Bytes of bundles in the raw archive", value=archived or 0
        )
        if self.per_sim:
            yield from self._quotas()

    def _quotas(self) -> Iterator[Metric]:
        labels = ["node", "interface", "mcc_mnc"]
        families = {
            key: GaugeMetricFamily(f"testbed_quota_{key}_bytes", text, labels=labels)
            for key, text in (
                ("used", "Bytes charged to the SIM this period (settled runs)"),
                ("reserved", "Bytes reserved on the SIM this period (booked runs)"),
                ("limit", "The SIM's monthly cap (absent: no cap, nothing is booked)"),
                ("overrun", "Bytes measured beyond the runs' reservations this period"),
            )
        }
        for q in list_quotas(self.ctx).sims:
            if q.mcc_mnc is None:
                continue  # a cap set for an interface the agent has not reported yet
            values = [q.node, q.interface, q.mcc_mnc]
            families["used"].add_metric(values, q.used)
            families["reserved"].add_metric(values, q.reserved)
            families["overrun"].add_metric(values, q.overrun)
            if q.limit is not None:
                families["limit"].add_metric(values, q.limit)
        yield from families.values()
