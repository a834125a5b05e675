"""The installed studies, checked as a whole at start.

Each layer of the core takes its own contribution from the installed studies when it
first needs it (ingest its readers, releases their tables, the pages their routes);
:func:`load` asks every layer at once, so that a conflict (two studies claiming one
result format, one page or one table; a study that fails to import) stops the
orchestrator as it starts, with a message that names the studies and what to do,
rather than on the first run of that format. It also says which manifests declare a
result format that no installed study reads (their runs are archived, but give no
points).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.catalogue.manifest import Manifest
from orchestrator.catalogue.plugins import Loaded, StudyLoadError, installed
from orchestrator.dataset.contrib import derived_tables, point_tables
from orchestrator.dataset.tables import PointTable
from orchestrator.metrics.contrib import installed_collectors
from orchestrator.pages.contrib import StudyPage, installed_choice_sources, installed_pages
from orchestrator.services.planhooks import installed_hooks
from orchestrator.study.model import Study
from orchestrator.timeseries.readers import Readers
from orchestrator.timeseries.schema import installed_readers

log = logging.getLogger(__name__)

__all__ = ["Studies", "StudyLoadError", "forget", "installed_studies_of", "load",
           "unread_formats"]


@dataclass(frozen=True)
class Studies:
    """Every installed study and what each layer took from them."""

    studies: tuple[Study, ...]
    readers: Readers
    pages: tuple[StudyPage, ...]
    tables: tuple[PointTable, ...]


def installed_studies_of(loaded: Sequence[Loaded]) -> tuple[Study, ...]:
    """The loaded entry points' studies; refuses one that gives no :class:`Study`."""
    for one in loaded:
        if not isinstance(one.study, Study):
            raise StudyLoadError(
                f"entry point {one.entry_point} of {one.distribution} gives a "
                f"{type(one.study).__name__}, not an orchestrator.study.Study; point it at "
                "the study object (or a function returning one)")
    return tuple(s.study for s in loaded if isinstance(s.study, Study))


def forget() -> None:
    """Forget the installed studies and every layer's contribution (each is loaded once
    per process): the next use loads them afresh, as after installing a study."""
    for cached in (installed, installed_readers, installed_pages, installed_choice_sources,
                   point_tables, derived_tables, installed_collectors, installed_hooks):
        cached.cache_clear()


def load() -> Studies:
    """The installed studies, every layer's contribution checked; raises
    :class:`StudyLoadError` (its message says what to do) on any conflict."""
    studies = Studies(installed_studies_of(installed()), installed_readers(),
                      installed_pages(), point_tables())
    derived_tables()
    installed_choice_sources()
    installed_collectors()
    installed_hooks()
    return studies


def unread_formats(catalogue: Mapping[str, Manifest], studies: Studies) -> Sequence[str]:
    """The experiments whose declared result format no installed study reads."""
    return [f"{m.name} ({m.result.format} v{m.result.version})"
            for m in catalogue.values() if m.result.format not in studies.readers.results]
