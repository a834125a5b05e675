"""What a study contributes to the pages: a page under ``/pages/<slug>``, built from the
time-series store through the caller's filters, and its entry in the navigation.

The routes (:mod:`.routes`) serve every installed study's pages beside the core's, the
same way (sign-in, filters, what the caller may read); the navigation and the index
list them by ``order``. Studies are found by entry point
(:mod:`orchestrator.catalogue.plugins`); a page whose slug another page has is refused
at start, naming both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache

from orchestrator.catalogue.plugins import Loaded, StudyLoadError, installed
from orchestrator.pages.data import Filters
from orchestrator.pages.queries import TimeSeriesQuery
from orchestrator.pages.views import CORE_PAGES, NavEntry, Page, Zones
from orchestrator.services.access import Readable

#: Builds a page from the store, the caller's filters, the nodes' time zones and what
#: the caller may read.
PageBuilder = Callable[[TimeSeriesQuery, Filters, Zones, Readable], Page]


@dataclass(frozen=True)
class ChoiceSource:
    """A measurement whose points fill the pages' filter drop-downs: the campaigns,
    operators and nodes that have a ``field`` in it (a study's main measurement)."""

    measurement: str
    field: str


@dataclass(frozen=True)
class StudyPage:
    """One page of a study."""

    slug: str  # served at /pages/<slug>
    title: str  # its name in the navigation and on the index
    summary: str  # what it shows, on the index
    build: PageBuilder
    #: Its place in the navigation: the first-party studies' pages are at multiples of 10
    #: (hourly 10, daily 20, ABw vs TAT 30, time of day 40, ABw proxy 90), the core's
    #: campaigns and fleet last (1000, 1010).
    order: int = 500

    @property
    def entry(self) -> NavEntry:
        return NavEntry(self.slug, self.title, self.summary, self.order)


def pages_of(studies: Iterable[Loaded]) -> tuple[StudyPage, ...]:
    """The studies' pages; refuses a page whose slug is taken (by the core or another
    study) or that is no :class:`StudyPage`."""
    taken = {e.slug: "the core" for e in CORE_PAGES}
    out: list[StudyPage] = []
    for study in studies:
        value = getattr(study.study, "pages", ())
        for page in value if isinstance(value, tuple | list) else (value,):
            if not isinstance(page, StudyPage):
                raise StudyLoadError(f"study {study.entry_point}: its pages must be "
                                     "StudyPage objects (orchestrator.study.StudyPage)")
            if page.slug in taken:
                raise StudyLoadError(
                    f"page /pages/{page.slug} of study {study.entry_point} "
                    f"({study.distribution}) is already served by {taken[page.slug]}; "
                    "give it another slug, or uninstall one of them")
            taken[page.slug] = study.entry_point
            out.append(page)
    return tuple(out)


@cache
def installed_pages() -> tuple[StudyPage, ...]:
    """The installed studies' pages (loaded once per process)."""
    return pages_of(installed())


def choice_sources_of(studies: Iterable[Loaded]) -> tuple[ChoiceSource, ...]:
    """The studies' sources of the filter drop-downs, each once."""
    out: list[ChoiceSource] = []
    for study in studies:
        value = getattr(study.study, "choices", ())
        for source in value if isinstance(value, tuple | list) else (value,):
            if not isinstance(source, ChoiceSource):
                raise StudyLoadError(f"study {study.entry_point}: its choices must be "
                                     "ChoiceSource objects (orchestrator.study.ChoiceSource)")
            if source not in out:
                out.append(source)
    return tuple(out)


@cache
def installed_choice_sources() -> tuple[ChoiceSource, ...]:
    """The installed studies' sources of the filter drop-downs (loaded once)."""
    return choice_sources_of(installed())


def navigation(pages: Iterable[StudyPage] | None = None) -> tuple[NavEntry, ...]:
    """The navigation: the core's pages and the studies', by their order."""
    studies = installed_pages() if pages is None else tuple(pages)
    return tuple(sorted((*CORE_PAGES, *(p.entry for p in studies)),
                        key=lambda e: (e.order, e.slug)))
