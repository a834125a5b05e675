"""The first-transfer page (``/pages/goodput``), in the form of Pentikousis et al.'s
figures: per operator and direction, one box per transfer size D of the goodputs of
the transfers after the first, with each run's first-transfer goodput g1 marked over
it, and a table of every run's g1 against the 95 % interval of the median of the rest.

Rows in, a page model out (pure); the rows come from :func:`goodput_transfers`.
Each run's figures are recomputed from its transfers with the experiment kit's code
(:mod:`testbed_kit.goodput`), the code that wrote the run's own result.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.study import (
    MBPS,
    Filters,
    Page,
    Readable,
    Section,
    Table,
    TimeSeriesQuery,
    Where,
    no_data,
    result_rows,
    select_points,
    svg,
    text,
    where_of,
)
from studies.goodput_sequence.points import GOODPUT
from testbed_kit.goodput import MIN_REST, GoodputSummary, summarise

SLUG = "goodput"


@dataclass(frozen=True)
class GoodputRow:
    """One transfer of a goodput-sequence run (a ``goodput`` point)."""

    time_ns: int
    where: Where
    campaign: str
    run: str
    direction: str
    size_bytes: int
    index: int  # 1: the first transfer after the idle gap
    goodput_bps: float


@dataclass(frozen=True)
class RunFigures:
    run: str
    where: Where
    direction: str
    size_bytes: int
    rest_bps: tuple[float, ...]
    summary: GoodputSummary


def size_label(size: int) -> str:
    """``4 KB``, ``256 KB``, ``1 MB`` (binary multiples, as the reference's sizes)."""
    for unit, factor in (("MB", 1024**2), ("KB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def run_figures(rows: Sequence[GoodputRow]) -> tuple[list[RunFigures], list[str]]:
    """Each run's figures from its transfers, and a note for each run with too few."""
    by_run: dict[str, list[GoodputRow]] = defaultdict(list)
    for r in rows:
        by_run[r.run].append(r)
    out, notes = [], []
    for run, transfers in sorted(by_run.items()):
        transfers.sort(key=lambda r: r.index)
        if len(transfers) < MIN_REST + 1 or transfers[0].index != 1:
            notes.append(f"run {run}: {len(transfers)} transfers stored, not the first "
                         f"and {MIN_REST} more; left out")
            continue
        rates = [r.goodput_bps for r in transfers]
        first = transfers[0]
        out.append(RunFigures(run=run, where=first.where, direction=first.direction,
                              size_bytes=first.size_bytes, rest_bps=tuple(rates[1:]),
                              summary=summarise(rates, first.size_bytes)))
    return out, notes


def _mbps(v: float) -> str:
    return f"{v / MBPS:.3g}"


def run_table(runs: Sequence[RunFigures]) -> Table:
    rows = tuple(
        (f.run, f.where.node, f.where.operator_label, f.direction, size_label(f.size_bytes),
         str(f.summary.transfers), _mbps(f.summary.g1_bps), _mbps(f.summary.median_bps),
         f"{_mbps(f.summary.ci_low_bps)}-{_mbps(f.summary.ci_high_bps)}",
         f"{f.summary.g1_excess_s:.3f}" if f.summary.g1_excess_s is not None else "",
         "yes" if f.summary.g1_below_ci else "no")
        for f in sorted(runs, key=lambda f: (f.where.operator_label, f.direction,
                                             f.size_bytes, f.run)))
    return Table(caption="Each run: g1 against the median of the other transfers",
                 headers=("run", "node", "operator", "direction", "D", "n", "g1 (Mbit/s)",
                          "median of the rest (Mbit/s)", "95 % CI of the median (Mbit/s)",
                          "g1's extra time (s)", "g1 below the CI (by > 10 ms)"),
                 rows=rows, css_class="goodput-runs")


def goodput_page(rows: Sequence[GoodputRow], *, filters: Filters) -> Page:
    title = "First-transfer goodput"
    intro = ("After an idle gap longer than the radio's release timer, n back-to-back "
             "transfers of D bytes. Boxes: the goodput of the transfers after the first "
             "(quartiles, whiskers at 1.5 IQR); red diamonds: each run's first transfer "
             "g1. A first transfer below the box pays for the radio's promotion.")
    if not rows:
        return Page(SLUG, title, intro, empty=no_data("goodput-sequence", filters))
    runs, notes = run_figures(rows)
    if not runs:
        return Page(SLUG, title, intro, notes=tuple(notes),
                    empty=f"No complete goodput-sequence runs for {filters.describe()} yet.")
    groups: dict[tuple[str, str, str], list[RunFigures]] = defaultdict(list)
    for f in runs:
        groups[(f.where.country or "??", f.where.operator_label, f.direction)].append(f)
    charts = []
    for i, ((country, label, direction), fs) in enumerate(sorted(groups.items())):
        sizes = sorted({f.size_bytes for f in fs})
        boxes = [svg.box_stats([v / MBPS for f in fs if f.size_bytes == d for v in f.rest_bps])
                 for d in sizes]
        marks = [[f.summary.g1_bps / MBPS for f in fs if f.size_bytes == d] for d in sizes]
        charts.append(svg.box_plot(
            chart_id=f"goodput-{i}", title=f"{country} / {label}, {direction}",
            desc=f"{len(fs)} runs: goodput per transfer size, g1 marked",
            categories=[size_label(d) for d in sizes], boxes=boxes, marks=marks,
            mark_name="g1", x_label="transfer size D", y_label="goodput (Mbit/s)",
            unit=" Mbit/s", colour_index=i))
    sections = (Section(heading="Goodput per transfer size, per operator and direction",
                        charts=tuple(charts)),
                Section(heading="Runs", tables=(run_table(runs),)))
    return Page(SLUG, title, intro, sections=sections, notes=tuple(notes))


# --- the page's query ------------------------------------------------------------------


def goodput_query(filters: Filters) -> str:
    return select_points(GOODPUT, ("goodput_bps", "index", "size"), filters)


def goodput_transfers(ts: TimeSeriesQuery, filters: Filters, *,
                      readable: Readable) -> list[GoodputRow]:
    """Every transfer of the goodput-sequence runs the caller may read."""
    out = []
    for row in result_rows(ts.query(goodput_query(filters))):
        if row.get("goodput_bps") is None or not readable.run(text(row, "run")):
            continue
        out.append(GoodputRow(
            time_ns=int(row["time"]), where=where_of(row), campaign=text(row, "campaign"),
            run=text(row, "run"), direction=text(row, "direction"),
            size_bytes=int(text(row, "size") or 0), index=int(row.get("index") or 0),
            goodput_bps=float(row["goodput_bps"])))
    return out
