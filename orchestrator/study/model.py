"""A study: what one experiment's results mean to the orchestrator, as one object.

The core speaks to every study through the same contributions, each optional (Nomad's
task drivers, pytest's plug-ins): its result formats and how to read them into points,
the schema of the measurements it writes, its tables in an open-data release, its
pages. Whatever describes the experiment itself (a run is a whole session, the server
may be the sender) is a field of its ``experiment.yaml``, not of the study.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.registry import Collector

from orchestrator.dataset.tables import DerivedTable, PointTable
from orchestrator.pages.contrib import ChoiceSource, StudyPage
from orchestrator.services.planhooks import ProxyVerdicts
from orchestrator.timeseries.readers import Measurement, RecordsReader, ResultReader


@dataclass(frozen=True)
class ResultColumn:
    """A column of ``testbed results`` (a campaign's key figures, one row per run): its
    ``value`` of a run's result (the JSON the API serves), None when the result has no
    such figure. Studies' columns of one name are one column, each run showing the
    first study's value that is not None; a column named as the core's (``bytes``)
    gives the core's a fallback."""

    name: str
    value: Callable[[Mapping[str, Any]], object | None]
    #: Its place among the studies' columns, before the core's last (``bytes``).
    order: int = 500


@dataclass(frozen=True)
class Study:
    """One study, as a package names it under the ``testbed.studies`` entry points."""

    name: str
    #: Reads result files of its formats (``format`` -> versions) into points.
    reader: ResultReader | None = None
    #: Reads JSON-lines tool records (at most one installed study does).
    records: RecordsReader | None = None
    #: The measurements it writes: names, fields, types, units.
    measurements: tuple[Measurement, ...] = ()
    #: Its tables in a release (of its measurements' points).
    tables: tuple[PointTable, ...] = ()
    #: Its release tables made from other tables' rows once every run is collected.
    derived: tuple[DerivedTable, ...] = ()
    #: Its pages, each with its route and its place in the navigation.
    pages: tuple[StudyPage, ...] = ()
    #: Proxy mode's answers at each planning pass (does a SIM's next window need its
    #: expensive measurement?), from the store.
    proxy_verdicts: ProxyVerdicts | None = None
    #: Its Prometheus series, served on ``/metrics`` after the core's.
    collectors: tuple[Collector, ...] = ()
    #: Its columns in ``testbed results``.
    columns: tuple[ResultColumn, ...] = ()
    #: Measurements whose points fill the pages' filter drop-downs.
    choices: tuple[ChoiceSource, ...] = ()

    @property
    def formats(self) -> Mapping[str, frozenset[int]]:
        """The result formats it reads, with their versions."""
        return self.reader.formats if self.reader else {}
