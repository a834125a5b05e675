"""The ABw tools page (``/pages/abw-tools``), in the form of Goga & Teixeira's comparison
of available-bandwidth tools on home access links: per link (operator and node's
interface) and direction, each method at each probe size judged on accuracy (the
estimate against TAT on the same link), on how long an estimate takes, and on what it
costs (probe bytes per estimate, and the probes' rate while measuring as a share of
TAT); and, per method, the small probes' error beside the large ones'.

Pure: rows in, a page model out (the rows come from :func:`.queries.abw_tools_estimates`,
the ``abw_tools`` points); the figures are the kit's (:mod:`testbed_kit.abw_tools`),
the code the experiment writes its own summary with.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.study import (
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
    slug,
    svg,
    text,
    where_of,
)
from studies.abw_tools.points import ABW_TOOLS
from testbed_kit.abw_tools import TOLERANCE, Cell, CellFigures, Estimate, Paired, summarise

SLUG = "abw-tools"
TITLE = "ABw tools"


@dataclass(frozen=True)
class AbwToolsRow:
    """One estimate of an abw-tools session (an ``abw_tools`` point)."""

    time_ns: int
    where: Where
    interface: str
    run: str
    direction: str
    method: str
    size: int
    estimate_bps: float
    tat_bps: float
    tats: int
    latency_s: float
    probe_bytes: int
    probe_packets: int
    control_bytes: int
    repetition: int
    step: int


def _paired(r: AbwToolsRow) -> Paired:
    return Paired(Estimate(step=r.step, repetition=r.repetition, cell=Cell(r.method, r.size),
                           start_unix_s=r.time_ns / 1e9, estimate_bps=r.estimate_bps,
                           latency_s=r.latency_s, probe_bytes=r.probe_bytes,
                           probe_packets=r.probe_packets, control_bytes=r.control_bytes),
                  tat_bps=r.tat_bps, tats=r.tats)


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x * 100:+.1f}"


def _summary_row(what: tuple[str, ...], f: CellFigures) -> tuple[str, ...]:
    return (*what, f.cell.method, str(f.cell.size), str(f.estimates), _pct(f.error_median),
            f"{_pct(f.error_q1)} to {_pct(f.error_q3)}", f"{f.within} of {f.estimates}",
            f"{f.estimate_median_bps / 1e6:.3g}", f"{f.tat_mean_bps / 1e6:.3g}",
            f"{f.latency_mean_s:.2f}", f"{f.probe_bytes_mean / 1e3:.0f}",
            f"{f.control_bytes_mean / 1e3:.1f}",
            "" if f.overhead_mean is None else f"{f.overhead_mean * 100:.1f}")


def _charts(name: str, paired: dict[Cell, list[Paired]]) -> list[str]:
    """Accuracy, latency and probe bytes: one box per cell."""
    order = [f.cell for f in summarise([p for ps in paired.values() for p in ps])]
    labels = [c.label for c in order]
    metrics: tuple[tuple[str, str, str, Callable[[Paired], float]], ...] = (
        ("accuracy", "Estimate as % of TAT (100: agreement)", "%",
         lambda p: p.estimate.estimate_bps / p.tat_bps * 100),
        ("latency", "Latency per estimate (s)", " s", lambda p: p.estimate.latency_s),
        ("probe bytes", "Probe bytes per estimate (kB)", " kB",
         lambda p: p.estimate.probe_bytes / 1e3),
    )
    return [svg.box_plot(
        chart_id=f"abw-tools-{slug(name)}-{slug(metric)}", title=f"{name}: {metric}",
        desc=f"Distribution of {metric} per ABw method and probe size.", categories=labels,
        boxes=[svg.box_stats([value(p) for p in paired[c]]) for c in order],
        x_label="Method and probe size", y_label=y_label, colour_index=i, unit=unit)
        for i, (metric, y_label, unit, value) in enumerate(metrics)]


def abw_tools_page(rows: Sequence[AbwToolsRow], *, filters: Filters) -> Page:
    intro = ("Every ABw method of the estimator (yaz, pathload-like, spruce-like) at a small "
             "and a large probe size, each estimate between TCP achievable-throughput (TAT) "
             "transfers on the same link and judged against their mean: error = (ABw - "
             "TAT) / TAT, negative when the method underestimates. After Goga and "
             "Teixeira: small probes underestimate behind a gateway that caps packets per "
             "second. Overhead: the probes' mean rate while the tool measured, as a share "
             "of TAT.")
    if not rows:
        return Page(SLUG, TITLE, intro, empty=no_data("abw-tools", filters))
    groups: dict[tuple[str, str, str, str], list[AbwToolsRow]] = defaultdict(list)
    for r in rows:
        groups[(r.where.operator_label, r.where.node, r.interface, r.direction)].append(r)
    charts: list[str] = []
    summary: list[tuple[str, ...]] = []
    sizes: list[tuple[str, ...]] = []
    for (label, node, iface, direction), rs in sorted(groups.items()):
        paired: dict[Cell, list[Paired]] = defaultdict(list)
        for r in rs:
            p = _paired(r)
            paired[p.estimate.cell].append(p)
        what = (label, f"{node} {iface}".strip(), direction)
        figures = summarise([p for ps in paired.values() for p in ps])
        summary.extend(_summary_row(what, f) for f in figures)
        charts.extend(_charts(f"{label} on {what[1]} ({direction})", paired))
        by_method: dict[str, list[CellFigures]] = defaultdict(list)
        for f in figures:
            by_method[f.cell.method].append(f)
        for method, fs in by_method.items():
            if len(fs) < 2:
                continue
            small, large = fs[0], fs[-1]  # by size
            sizes.append((*what, method, f"{small.cell.size} / {large.cell.size}",
                          _pct(small.error_median), _pct(large.error_median),
                          f"{(small.error_median - large.error_median) * 100:+.1f}"))
    place = ("Operator", "Link", "Direction")
    return Page(SLUG, TITLE, intro, sections=(
        Section(heading="Methods compared", charts=tuple(charts), tables=(Table(
            caption="Accuracy, latency and cost per method and probe size",
            headers=(*place, "Method", "Probe size (B)", "Estimates", "Median error (%)",
                     "Error quartiles (%)", f"Within {TOLERANCE:.0%} of TAT",
                     "Median estimate (Mbit/s)", "Mean TAT (Mbit/s)", "Mean latency (s)",
                     "Probe bytes per estimate (kB)", "Control bytes (kB)",
                     "Overhead (% of TAT)"),
            rows=tuple(summary), css_class="abw-tools"),)),
        Section(heading="Small against large probes", text=(
            "Per method, the median error with the smallest and the largest probe size: "
            "behind a packet-rate cap the small probes' stream reaches the cap before the "
            "link's bit rate, and the method reads the cap as the available bandwidth."),
            tables=(Table(
                caption="Median error by probe size",
                headers=(*place, "Method", "Sizes (B)", "Small probes (%)",
                         "Large probes (%)", "Difference (points)"),
                rows=tuple(sizes), css_class="abw-tools-sizes"),)),
    ))


# --- the page's query ------------------------------------------------------------------


def abw_tools_query(filters: Filters) -> str:
    return select_points(ABW_TOOLS, ("estimate_bps", "tat_bps", "tats", "latency_s",
                                     "probe_bytes", "probe_packets", "control_bytes",
                                     "repetition", "step", "method", "size", "interface"),
                         filters)


def abw_tools_estimates(ts: TimeSeriesQuery, filters: Filters, *,
                        readable: Readable) -> list[AbwToolsRow]:
    """Every estimate of the abw-tools runs the caller may read."""
    out = []
    for row in result_rows(ts.query(abw_tools_query(filters))):
        if row.get("estimate_bps") is None or row.get("tat_bps") is None \
                or not readable.run(text(row, "run")):
            continue
        out.append(AbwToolsRow(
            time_ns=int(row["time"]), where=where_of(row), interface=text(row, "interface"),
            run=text(row, "run"), direction=text(row, "direction"),
            method=text(row, "method"), size=int(row["size"]),
            estimate_bps=float(row["estimate_bps"]), tat_bps=float(row["tat_bps"]),
            tats=int(row.get("tats") or 0), latency_s=float(row.get("latency_s") or 0.0),
            probe_bytes=int(row.get("probe_bytes") or 0),
            probe_packets=int(row.get("probe_packets") or 0),
            control_bytes=int(row.get("control_bytes") or 0),
            repetition=int(row.get("repetition") or 0), step=int(row.get("step") or 0)))
    return out
