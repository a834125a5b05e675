"""A study: what one experiment's results mean to the orchestrator, as one object.

The core speaks to every study through the same contributions, each optional (Nomad's
task drivers, pytest's plug-ins): its result formats and how to read them into points,
the schema of the measurements it writes, its tables in an open-data release, its
pages. Whatever describes the experiment itself (a run is a whole session, the server
may be the sender) is a field of its ``experiment.yaml``, not of the study.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.dataset.tables import PointTable
from orchestrator.pages.contrib import StudyPage
from orchestrator.timeseries.readers import Measurement, RecordsReader, ResultReader


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
    #: Its pages, each with its route and its place in the navigation.
    pages: tuple[StudyPage, ...] = ()

    @property
    def formats(self) -> Mapping[str, frozenset[int]]:
        """The result formats it reads, with their versions."""
        return self.reader.formats if self.reader else {}
