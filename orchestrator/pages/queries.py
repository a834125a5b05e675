"""The pages' InfluxQL: the only module of the pages that knows the query language.

Only plain InfluxQL over the v1 ``/query`` API, so the same queries run on InfluxDB
1.x, 2.x and 3.x (docs/timeseries.md). Raw points are read (e.g. one ``tat_summary``
point per transfer) and aggregated in Python by the pages' builders (the studies'):
hours and days must be the node's local time, which InfluxQL's ``GROUP BY time()``
(UTC buckets, one offset per query) cannot give per node. No query uses
``GROUP BY time()``, so none needs a time bound to avoid InfluxDB 1.x filling buckets
from 1970; a window is still applied when no campaign is chosen.

Filter values reach the query only as escaped string literals. Points of runs the
signed-in user may not read (another project's, services.access) are dropped as they
are read: the store's points carry run and campaign ids, not the project.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from orchestrator.pages.data import Choice, Choices, Filters, Where
from orchestrator.services.access import Readable
from orchestrator.timeseries.influx import Series, literal

if TYPE_CHECKING:  # contrib imports this module for the store's protocol
    from orchestrator.pages.contrib import ChoiceSource

PLACE_TAGS = ("node", "country", "operator", "operator_name")
RUN_TAGS = ("campaign", "run", "session", "direction")


@runtime_checkable
class TimeSeriesQuery(Protocol):
    """What the pages need of the time-series store: InfluxQL in, series out, times as
    integer nanoseconds. :class:`orchestrator.timeseries.influx.InfluxClient` is one."""

    def query(self, influxql: str, *, epoch: str = "ns") -> list[Series]: ...


def ident(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def where_clause(filters: Filters, *, narrow: bool = True) -> str:
    """``WHERE`` for the filters; ``narrow`` False keeps only campaign and window (for
    the drop-downs, which must offer every operator and node of the campaign)."""
    conds = []
    if filters.campaign:
        conds.append(f'"campaign" = {literal(filters.campaign)}')
    if narrow and filters.operator:
        conds.append(f'"operator" = {literal(filters.operator)}')
    if narrow and filters.node:
        conds.append(f'"node" = {literal(filters.node)}')
    if filters.window_days is not None:
        conds.append(f"time >= now() - {int(filters.window_days)}d")
    return (" WHERE " + " AND ".join(conds)) if conds else ""


def _select(measurement: str, fields: tuple[str, ...], filters: Filters) -> str:
    cols = ", ".join(ident(c) for c in (*fields, *PLACE_TAGS, *RUN_TAGS))
    return f"SELECT {cols} FROM {ident(measurement)}{where_clause(filters)}"


def _rows(series: list[Series]) -> list[dict[str, Any]]:
    return [row for s in series for row in s.rows()]


def _s(row: dict[str, Any], key: str) -> str:
    v = row.get(key)
    return "" if v is None else str(v)


def _where(row: dict[str, Any]) -> Where:
    return Where(node=_s(row, "node"), country=_s(row, "country"),
                 operator=_s(row, "operator"), operator_name=_s(row, "operator_name"))


#: For the studies' own queries (orchestrator.study): the same SELECT of a measurement's
#: fields with the place and run tags, its rows, a tag as text, a row's place.
select_points = _select
result_rows = _rows
text = _s
where_of = _where


def choices(ts: TimeSeriesQuery, filters: Filters, *, readable: Readable,
            sources: Sequence[ChoiceSource]) -> Choices:
    """Campaigns (the caller's), operators (with names) and nodes (the shared fleet)
    that have points in the installed studies' sources (:class:`~.contrib.ChoiceSource`:
    the TAT transfers for the first-party studies)."""
    campaigns: set[str] = set()
    operators: dict[str, str] = {}
    nodes: set[str] = set()
    for source in sources:
        campaigns |= {_s(r, "value") for r in _rows(ts.query(
            f'SHOW TAG VALUES FROM {ident(source.measurement)} WITH KEY = "campaign"'))}
        combos = ts.query(f'SELECT count({ident(source.field)}) '
                          f'FROM {ident(source.measurement)}'
                          f"{where_clause(filters, narrow=False)} "
                          'GROUP BY "operator", "operator_name", "node"')
        for s in combos:
            where = Where(node=s.tags.get("node", ""), country="",
                          operator=s.tags.get("operator", ""),
                          operator_name=s.tags.get("operator_name", ""))
            if where.operator:
                operators[where.operator] = where.operator_label
            if where.node:
                nodes.add(where.node)
    return Choices(campaigns=tuple(c for c in sorted(campaigns) if c and readable.campaign(c)),
                   operators=tuple(Choice(k, v) for k, v in sorted(operators.items(),
                                                                   key=lambda kv: kv[1])),
                   nodes=tuple(sorted(nodes)))
