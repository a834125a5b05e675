"""Which nodes and SIMs of the fleet need a look, and which of them a page shows (pure).

At 10,000 nodes a table of every node and every SIM is 40,000 rows: the fleet page
(:mod:`orchestrator.pages.fleet`) opens with the whole fleet counted (nodes by health,
SIMs near, at or over their cap) and shows one page of nodes at a time, those needing a
look first, narrowed by filters that the counts link to. These are its decisions, on
plain values: the query's parameters checked, a SIM's classes, the counts and the
pages. The order, health first, is :data:`HEALTH_ORDER`, which the database applies
(``orchestrator.store.health``, node health as SQL) to 10,000 nodes at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

#: Health in this order: what needs a look comes first ("new": provisioned, its agent
#: never registered).
HEALTH_ORDER = ("offline", "stale", "new", "maintenance", "online")

#: Nodes per page.
PAGE_SIZE = 100

#: What a SIM's figures may call for, each a ``?sims=`` filter, and what it means: the
#: 80 % and 95 % of the alert rules (``deploy/prometheus/rules``: used of the cap), a
#: settled overrun, and a SIM with no cap (the planner books nothing on it).
SIM_CLASSES = {
    "near-cap": "used 80 % to 95 % of its cap",
    "at-cap": "used 95 % of its cap or more",
    "overrun": "charged beyond its cap this period",
    "no-cap": "no cap: nothing is booked on it",
}


class BadFleetFilter(ValueError):
    """A filter of the fleet page that names nothing it knows; its message says what
    it takes."""


@dataclass(frozen=True)
class FleetQuery:
    """What the fleet page shows of the fleet: nodes of one health, nodes whose id
    contains ``node``, nodes with a SIM in one of :data:`SIM_CLASSES`, and which page."""

    health: str | None = None
    node: str | None = None
    sims: str | None = None
    page: int = 1

    def query_string(self, **change: object) -> str:
        """This query's URL parameters (with ``change`` applied), "" for the default."""
        items = {"health": self.health, "node": self.node, "sims": self.sims,
                 "page": self.page, **change}
        return urlencode([(k, str(v)) for k, v in items.items()
                          if v not in (None, "") and not (k == "page" and v == 1)])

    def describe(self) -> str:
        parts = [f"{self.health} nodes" if self.health else "all nodes"]
        if self.node:
            parts.append(f"whose id contains {self.node!r}")
        if self.sims:
            parts.append(f"with a SIM {SIM_CLASSES[self.sims]}")
        return " ".join(parts)


def parse_query(*, health: str | None, node: str | None, sims: str | None,
                page: str | None) -> FleetQuery:
    """The page's query parameters, checked (empty ones are none), or
    :class:`BadFleetFilter` saying what each takes."""
    health = health or None
    if health is not None and health not in HEALTH_ORDER:
        raise BadFleetFilter(f"health must be one of {', '.join(HEALTH_ORDER)}, "
                             f"not {health!r}")
    sims = sims or None
    if sims is not None and sims not in SIM_CLASSES:
        raise BadFleetFilter(f"sims must be one of {', '.join(SIM_CLASSES)}, not {sims!r}")
    n = 1
    if page:
        try:
            n = int(page)
        except ValueError as e:
            raise BadFleetFilter(f"page must be a whole number, not {page!r}") from e
        if n < 1:
            raise BadFleetFilter("page must be 1 or more")
    return FleetQuery(health=health, node=(node or "").strip() or None, sims=sims, page=n)


def sim_classes(*, capped: bool, limit: int | None, used: int, overrun: int) -> frozenset[str]:
    """Which of :data:`SIM_CLASSES` a SIM is in (none: nothing to look at). ``capped``:
    it has a cap, configured or the default (without one nothing is booked on it)."""
    out = set()
    if not capped:
        out.add("no-cap")
    elif limit:
        share = used / limit
        if share >= 0.95:
            out.add("at-cap")
        elif share >= 0.80:
            out.add("near-cap")
    if overrun:
        out.add("overrun")
    return frozenset(out)


@dataclass(frozen=True)
class FleetSelection:
    """How many nodes a query matches, the page of them shown (needing a look first,
    then by id), and how many pages there are."""

    matched: int
    shown: tuple[str, ...]
    pages: int


def page_of(matched: int, page: int, *, page_size: int = PAGE_SIZE) -> tuple[int, int]:
    """Where the asked-for page starts among the matched nodes, and how many pages
    there are (one at least: an empty fleet has an empty first page)."""
    return (page - 1) * page_size, max(1, -(-matched // page_size))


@dataclass(frozen=True)
class SimSummary:
    """The fleet's SIMs counted by class (:data:`SIM_CLASSES`), and each node's SIMs'
    classes together (for the ``?sims=`` filter), as of ``at``."""

    counts: Mapping[str, int]
    total: int
    of_node: Mapping[str, frozenset[str]]
    at: datetime


def summarise_sims(sims: Iterable[tuple[str, frozenset[str]]], at: datetime, *,
                   total: int | None = None) -> SimSummary:
    """From each SIM's node and classes (:func:`sim_classes`); ``total``: how many SIMs
    the fleet has, when ``sims`` are only those that may be in a class (else they are
    all of them)."""
    counts = {c: 0 for c in SIM_CLASSES}
    of_node: dict[str, frozenset[str]] = {}
    listed = 0
    for node, classes in sims:
        listed += 1
        for c in classes:
            counts[c] += 1
        if classes:
            of_node[node] = of_node.get(node, frozenset()) | classes
    return SimSummary(counts, listed if total is None else total, of_node, at)
