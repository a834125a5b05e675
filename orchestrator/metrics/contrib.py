"""What a study contributes to ``/metrics``: Prometheus collectors (prometheus_client's
``Collector``: an object whose ``collect()`` yields metric families when Prometheus
scrapes), served after the core's series in both views.

A study's series follow the core's rule (docs/monitoring.md): no label holds a run, a
campaign or a timestamp, so their cardinality grows with the fleet at most. A collector
that raises is logged and left out of that scrape: one study's defect does not cost the
fleet its monitoring. Studies are found by entry point
(:mod:`orchestrator.catalogue.plugins`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from functools import cache

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from orchestrator.catalogue.plugins import Loaded, StudyLoadError, installed

log = logging.getLogger(__name__)


def collectors_of(studies: Iterable[Loaded]) -> tuple[tuple[str, Collector], ...]:
    """The studies' collectors, each with the entry point that gave it; refuses one
    that has no ``collect()``."""
    out: list[tuple[str, Collector]] = []
    for study in studies:
        value = getattr(study.study, "collectors", ())
        for collector in value if isinstance(value, tuple | list) else (value,):
            if not callable(getattr(collector, "collect", None)):
                raise StudyLoadError(f"study {study.entry_point}: its collectors must be "
                                     "Prometheus collectors (an object with collect(), "
                                     "orchestrator.study.Collector)")
            out.append((study.entry_point, collector))
    return tuple(out)


@cache
def installed_collectors() -> tuple[tuple[str, Collector], ...]:
    """The installed studies' collectors (loaded once per process)."""
    return collectors_of(installed())


def study_families() -> Iterator[Metric]:
    """Every installed study's families of this scrape; a collector that raises is
    logged and skipped."""
    for where, collector in installed_collectors():
        try:
            families = list(collector.collect())
        except Exception:  # a study's defect: this scrape goes on without its series
            log.exception("study %s: its Prometheus collector failed; its series are "
                          "left out of this scrape", where)
            continue
        yield from families
