"""What the pages read from the time series, as plain rows (pure: no I/O).

:mod:`.queries` fills these from InfluxDB; :mod:`.views` turns them into page models.
Keeping the rows here, apart from both, lets the views be tested with rows made by
hand and keeps the query module the only one that knows InfluxQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

# The rows live with the pairing they feed (analysis.abwtat), below the services, so a
# dataset release computes the same figures as the pages; re-exported here.
from orchestrator.analysis.abwtat import AbwRow, TatSummaryRow, Where

__all__ = ["MAX_DAYS", "AbwRow", "Choice", "Choices", "Filters", "TatSummaryRow", "Where"]

#: Time window of a page when no campaign is chosen, days. A month of hourly runs on a
#: few hundred nodes is a few hundred thousand summary rows: still one quick query.
DEFAULT_DAYS = 30
#: Longest window a page accepts, days (a bit more than a year, a dataset's usual span).
MAX_DAYS = 400


@dataclass(frozen=True)
class Filters:
    """What the user narrowed the page to (query parameters ``campaign``, ``operator``,
    ``node``, ``days``). ``operator`` is the MCC-MNC tag. ``days`` None: the whole
    campaign when one is chosen, else the last :data:`DEFAULT_DAYS` days."""

    campaign: str | None = None
    operator: str | None = None
    node: str | None = None
    days: int | None = None

    @property
    def window_days(self) -> int | None:
        if self.days is not None:
            return self.days
        return None if self.campaign else DEFAULT_DAYS

    def describe(self) -> str:
        """The selection in words, for headings and "no data" messages."""
        parts = []
        if self.campaign:
            parts.append(f"campaign {self.campaign}")
        if self.operator:
            parts.append(f"operator {self.operator}")
        if self.node:
            parts.append(f"node {self.node}")
        if self.window_days is not None:
            parts.append(f"the last {self.window_days} days")
        return ", ".join(parts) if parts else "all measurements"

    def query_string(self) -> str:
        """The filters as URL query parameters (already escaped), for links."""
        pairs = [(k, v) for k, v in (("campaign", self.campaign),
                                     ("operator", self.operator), ("node", self.node),
                                     ("days", None if self.days is None else str(self.days)))
                 if v]
        return urlencode(pairs)


@dataclass(frozen=True)
class Choice:
    """One value offered in a filter's drop-down."""

    value: str
    label: str


@dataclass(frozen=True)
class Choices:
    """What the filter form offers: campaigns, operators and nodes that have TAT data."""

    campaigns: tuple[str, ...] = ()
    operators: tuple[Choice, ...] = ()
    nodes: tuple[str, ...] = ()
