"""What a study contributes to planning: the answers of a campaign's proxy mode (per SIM,
is the expensive measurement needed in its next window?), read from the time-series
store at each planning pass and handed to the pure planner in its snapshot
(``Snapshot.proxy``).

The core does the part every proxy has: only campaigns in proxy mode are asked about;
without a store there is no answer (every window books its full session: that costs
bytes, never calibration); and the planner's lock is held meanwhile, so the store is
asked without retries (a store that hangs costs the pass one request timeout). Studies
are found by entry point (:mod:`orchestrator.catalogue.plugins`); the ABw proxy's is
``studies/abw_proxy``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import cache
from typing import Protocol, runtime_checkable

from orchestrator.analysis.proxy import Verdict
from orchestrator.catalogue.plugins import Loaded, StudyLoadError, installed
from orchestrator.model.ids import CampaignId
from orchestrator.quotas.ledger import SimKey
from orchestrator.scheduling.selection import NodeFacts
from orchestrator.scheduling.snapshot import Campaign
from orchestrator.timeseries.influx import InfluxClient, Series

log = logging.getLogger(__name__)


@runtime_checkable
class Queryable(Protocol):
    """The store as a hook reads it: InfluxQL in, series out."""

    def query(self, influxql: str, *, epoch: str = "ns") -> list[Series]: ...


#: A study's proxy answers: the store, the campaigns in proxy mode, the fleet's nodes and
#: now, to the answer per campaign and SIM (a SIM without one books its full session).
ProxyVerdicts = Callable[[Queryable, Sequence[Campaign], Sequence[NodeFacts], datetime],
                         Mapping[tuple[CampaignId, SimKey], Verdict]]


def hooks_of(studies: Iterable[Loaded]) -> tuple[ProxyVerdicts, ...]:
    """The studies' proxy answers; refuses one that cannot be called."""
    out: list[ProxyVerdicts] = []
    for study in studies:
        hook = getattr(study.study, "proxy_verdicts", None)
        if hook is None:
            continue
        if not callable(hook):
            raise StudyLoadError(f"study {study.entry_point}: its proxy_verdicts must be a "
                                 "function (orchestrator.study.ProxyVerdicts)")
        out.append(hook)
    return tuple(out)


@cache
def installed_hooks() -> tuple[ProxyVerdicts, ...]:
    """The installed studies' proxy answers (loaded once per process)."""
    return hooks_of(installed())


def proxy_verdicts(ts: object, campaigns: Sequence[Campaign], nodes: Sequence[NodeFacts],
                   now: datetime) -> dict[tuple[CampaignId, SimKey], Verdict]:
    """Per campaign in proxy mode and SIM with a history, whether its next window needs
    the expensive measurement, from every installed study that answers."""
    proxied = [c for c in campaigns if c.spec.proxy is not None]
    if not proxied:
        return {}
    if not isinstance(ts, Queryable):
        log.warning("proxy mode: no time-series store to read; every window books its "
                    "full session")
        return {}
    if isinstance(ts, InfluxClient):  # the planner's lock is held: one try per query
        ts = ts.without_retries()
    out: dict[tuple[CampaignId, SimKey], Verdict] = {}
    for hook in installed_hooks():
        out.update(hook(ts, proxied, nodes, now))
    return out
