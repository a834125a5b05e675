"""Page models: rows from the time series turned into sections of charts and tables (pure).

Each ``*_page`` function takes the rows :mod:`.queries` read and the nodes' time zones
(from the node registry) and returns a :class:`Page`; :mod:`.html` lays it out. Nothing
here does I/O, so every figure on a page can be checked from rows made by hand.

Hours and days are the node's local time, as the campaigns are scheduled (DESIGN.md:
"correct scheduling in each node's local time"). A node the registry does not know (or
whose zone name is not in the tz database) falls back to UTC, and the page says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from orchestrator.analysis.timeofday import DiurnalResult
from orchestrator.pages.data import Filters

MBPS = 1e6  # rates are shown in Mbit/s
HOURS = tuple(f"{h:02d}" for h in range(24))


@dataclass(frozen=True)
class Table:
    caption: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    css_class: str = ""


@dataclass(frozen=True)
class Link:
    href: str
    text: str
    note: str = ""


@dataclass(frozen=True)
class Action:
    """A button that POSTs to ``path`` (a plain form: the pages run no script)."""

    path: str
    label: str


@dataclass(frozen=True)
class Section:
    heading: str
    text: str = ""
    charts: tuple[str, ...] = ()  # inline SVG
    tables: tuple[Table, ...] = ()
    links: tuple[Link, ...] = ()
    actions: tuple[Action, ...] = ()


@dataclass(frozen=True)
class Page:
    slug: str  # the path under /pages/ ("" for the index)
    title: str
    intro: str
    sections: tuple[Section, ...] = ()
    #: The plain sentence shown instead of charts when there is nothing to show.
    empty: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: Whether the page takes the campaign/operator/node/days filters (the time-series
    #: views do; the campaigns list does not).
    filterable: bool = True


# --- helpers --------------------------------------------------------------------------


def no_data(what: str, filters: Filters) -> str:
    """``No TAT measurements for campaign c-1 yet.``"""
    return f"No {what} measurements for {filters.describe()} yet."


@dataclass(frozen=True)
class Zones:
    """Node -> time zone, from the node registry; UTC for nodes it does not know."""

    names: Mapping[str, str]

    def of(self, node: str) -> tzinfo | None:
        """The node's zone, or None when unknown (the caller uses UTC and says so)."""
        name = self.names.get(node)
        if not name:
            return None
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return None

    def local(self, node: str, time_ns: int) -> datetime:
        return datetime.fromtimestamp(time_ns / 1e9, self.of(node) or UTC)

    def utc_note(self, nodes: Iterable[str]) -> tuple[str, ...]:
        unknown = sorted({n for n in nodes if self.of(n) is None})
        if not unknown:
            return ()
        return (f"No known time zone for node(s) {', '.join(unknown)}: their hours and "
                "days are UTC. Set the node's timezone in the registry to see local time.",)


def fmt(v: float, digits: int = 3) -> str:
    return f"{v:.{digits}g}" if math.isfinite(v) else "n/a"


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


#: A daily cycle is reported only when its amplitude is at least this share of the
#: series' mean: a TAT run's own spread on a steady link is a few per cent, so a
#: smaller cycle, however regular, is not a load pattern anyone plans around, and at
#: the permutation test's 5 % level a flat operator would otherwise get a "yes" in one
#: page of twenty.
MIN_CYCLE_SHARE = 0.05


def cycle_verdict(res: DiurnalResult, mean: float) -> str:
    share = res.amplitude / abs(mean) if mean else 0.0
    if not res.significant:
        return "no"
    if share < MIN_CYCLE_SHARE:
        return (f"no (a regular cycle of {100 * share:.1f} % of the mean, under "
                f"{100 * MIN_CYCLE_SHARE:.0f} %)")
    return "yes"


# --- index ----------------------------------------------------------------------------

@dataclass(frozen=True)
class NavEntry:
    """A page as the navigation and the index list it."""

    slug: str
    title: str
    summary: str  # what it shows
    order: int  # place in the navigation


#: The core's pages, as the index and the navigation list them; the studies' pages
#: (:mod:`.contrib`) are listed among them by their order.
CORE_PAGES = (
    NavEntry("campaigns", "Campaigns", "Each campaign's runs by state and the planner's "
             "decisions: what was deferred, skipped or rejected, and why.", 1000),
    NavEntry("fleet", "Fleet health", "Nodes by health (offline and stale first), last "
             "heartbeat, SIMs, free disk, bundles waiting; each SIM's data plan and use.",
             1010),
)


def index_page(nav: Sequence[NavEntry] = CORE_PAGES) -> Page:
    links = tuple(Link(f"/pages/{e.slug}", e.title, e.summary) for e in nav)
    return Page("", "Measurement dashboards",
                "The testbed's own views of the time series, for users without Grafana. "
                "Every page takes the filters campaign, operator (MCC-MNC), node and days.",
                sections=(Section(heading="Pages", links=links),))
