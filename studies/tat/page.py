"""The tat study's pages (pure): hourly and daily behaviour, and the time-of-day
significance, of the TAT transfers' mean rates (``tat_summary`` points, one per
transfer); :mod:`studies.tat.queries` reads the rows.

Hours and days are the node's local time, as the campaigns are scheduled (DESIGN.md:
"correct scheduling in each node's local time"). A node the registry does not know (or
whose zone name is not in the tz database) falls back to UTC, and the page says so.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import date, datetime, tzinfo

import numpy as np

from orchestrator.analysis.abwtat import TatSummaryRow
from orchestrator.analysis.timeofday import MIN_SAMPLES, diurnal
from orchestrator.study import (
    HOURS,
    MBPS,
    MIN_CYCLE_SHARE,
    Filters,
    Page,
    Section,
    Table,
    Zones,
    cycle_verdict,
    fmt,
    no_data,
    slug,
    svg,
)


def _hour_axis_label(zones: Zones, nodes: Iterable[str]) -> str:
    nodes = set(nodes)
    if all(zones.of(n) is None for n in nodes):
        return "Hour of day (UTC)"
    if any(zones.of(n) is None for n in nodes):
        return "Hour of day (node local time; UTC where unknown)"
    return "Hour of day (node local time)"


def _by_operator(rows: Iterable[TatSummaryRow]) -> dict[str, list[TatSummaryRow]]:
    out: dict[str, list[TatSummaryRow]] = defaultdict(list)
    for r in rows:
        out[r.where.operator_label].append(r)
    return dict(sorted(out.items()))



# --- hourly ---------------------------------------------------------------------------


def hourly_medians(rows: Sequence[TatSummaryRow], zones: Zones) -> dict[str, list[float | None]]:
    """Per operator, the median TAT rate (Mbit/s) of each local hour (None: no runs)."""
    out = {}
    for label, op_rows in _by_operator(rows).items():
        by_hour = _rates_by_hour(op_rows, zones)
        out[label] = [statistics.median(v) if v else None for v in by_hour]
    return out


def _rates_by_hour(rows: Iterable[TatSummaryRow], zones: Zones) -> list[list[float]]:
    by_hour: list[list[float]] = [[] for _ in range(24)]
    for r in rows:
        by_hour[zones.local(r.where.node, r.time_ns).hour].append(r.mean_bps / MBPS)
    return by_hour


def hourly_page(rows: Sequence[TatSummaryRow], *, zones: Zones, filters: Filters) -> Page:
    title = "Hourly behaviour"
    intro = ("TAT mean rate of each transfer, by hour of day, per operator: a box per hour "
             "(quartiles, median, whiskers to 1.5 IQR, outliers as circles).")
    if not rows:
        return Page("hourly", title, intro, empty=no_data("TAT", filters))
    x_label = _hour_axis_label(zones, (r.where.node for r in rows))
    per_op = {label: [svg.box_stats(v) for v in _rates_by_hour(op_rows, zones)]
              for label, op_rows in _by_operator(rows).items()}
    # One y scale for every operator, so their charts compare at a glance.
    y_max = max(max([b.high, *b.outliers]) for boxes in per_op.values()
                for b in boxes if b is not None)
    charts, summary = [], []
    for i, (label, op_rows) in enumerate(_by_operator(rows).items()):
        boxes = per_op[label]
        charts.append(svg.box_plot(
            chart_id=f"hourly-{slug(label)}", title=f"{label}: TAT rate by hour of day",
            desc=(f"Box plot of {len(op_rows)} TAT transfers of {label} by hour of day, "
                  f"{filters.describe()}."),
            categories=HOURS, boxes=boxes, x_label=x_label, y_max=y_max,
            y_label="TAT mean rate (Mbit/s)", unit=" Mbit/s", colour_index=i))
        medians = [b.median for b in boxes if b is not None]
        overall = statistics.median(r.mean_bps / MBPS for r in op_rows)
        swing = (max(medians) - min(medians)) / overall if overall > 0 else math.nan
        summary.append((label, str(len(op_rows)), str(len({r.where.node for r in op_rows})),
                        str(len(medians)), fmt(min(medians)), fmt(max(medians)),
                        fmt(100 * swing, 2)))
    table = Table(
        caption="Spread of the hourly medians per operator",
        headers=("Operator", "Transfers", "Nodes", "Hours with data",
                 "Lowest hourly median (Mbit/s)", "Highest hourly median (Mbit/s)",
                 "Swing (% of overall median)"),
        rows=tuple(summary), css_class="summary")
    return Page("hourly", title, intro,
                sections=(Section(heading="By hour of day", charts=tuple(charts),
                                  tables=(table,)),),
                notes=zones.utc_note(r.where.node for r in rows))


# --- daily ----------------------------------------------------------------------------


def daily_means(rows: Sequence[TatSummaryRow], zones: Zones) -> dict[str, dict[date, list[float]]]:
    """Per operator, the TAT rates (Mbit/s) of each local day."""
    out: dict[str, dict[date, list[float]]] = {}
    for label, op_rows in _by_operator(rows).items():
        days: dict[date, list[float]] = defaultdict(list)
        for r in op_rows:
            days[zones.local(r.where.node, r.time_ns).date()].append(r.mean_bps / MBPS)
        out[label] = dict(sorted(days.items()))
    return out


def daily_page(rows: Sequence[TatSummaryRow], *, zones: Zones, filters: Filters) -> Page:
    title = "Daily behaviour"
    intro = "Daily mean of the TAT transfers' mean rates, per operator (node local days)."
    if not rows:
        return Page("daily", title, intro, empty=no_data("TAT", filters))
    per_op = daily_means(rows, zones)
    all_days = sorted({d for days in per_op.values() for d in days})
    every = max(1, math.ceil(len(all_days) / 12))  # at most ~12 date labels fit
    ticks = [float(d.toordinal()) for d in all_days[::every]]
    series = [svg.XYSeries(name=label, points=[(float(d.toordinal()), statistics.fmean(v))
                                               for d, v in days.items()])
              for label, days in per_op.items()]
    chart = svg.line_chart(
        chart_id="daily", title="Daily mean TAT rate per operator",
        desc=f"Daily mean TAT rate of {len(per_op)} operator(s), {filters.describe()}.",
        series=series, x_label="Day (node local date)", y_label="Daily mean TAT rate (Mbit/s)",
        x_ticks=ticks, x_tick_label=lambda x: date.fromordinal(round(x)).strftime("%m-%d"),
        frame=svg.Frame(width=900, height=340))
    labels = list(per_op)
    table_rows = []
    for d in all_days:
        cells = []
        for label in labels:
            v = per_op[label].get(d)
            cells.append(f"{statistics.fmean(v):.3g} (n={len(v)})" if v else "")
        table_rows.append((d.isoformat(), *cells))
    table = Table(caption="Daily mean TAT rate (Mbit/s) and transfers per day",
                  headers=("Day", *labels), rows=tuple(table_rows))
    return Page("daily", title, intro,
                sections=(Section(heading="Daily means", charts=(chart,), tables=(table,)),),
                notes=zones.utc_note(r.where.node for r in rows))


# --- time of day ----------------------------------------------------------------------


def _utc_offset_h(zone: tzinfo | None, at_ns: int) -> float:
    if zone is None:
        return 0.0
    offset = datetime.fromtimestamp(at_ns / 1e9, zone).utcoffset()
    return 0.0 if offset is None else offset.total_seconds() / 3600


def _clock(hour: float) -> str:
    minutes = round(hour * 60) % (24 * 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def timeofday_page(rows: Sequence[TatSummaryRow], *, zones: Zones, filters: Filters,
                   n_boot: int = 999) -> Page:
    title = "Time-of-day significance"
    intro = ("Is there a daily cycle in each node's TAT rate on each operator? A 24 h "
             "sinusoid against a constant, by the difference of their BIC (ΔBIC > 2 is "
             "positive evidence), a permutation p-value (< 0.05), bootstrapped 95 % "
             "intervals, and the strongest Lomb-Scargle period (analysis.timeofday). A "
             f"cycle counts when its amplitude is at least {100 * MIN_CYCLE_SHARE:.0f} % "
             "of the mean rate.")
    if not rows:
        return Page("time-of-day", title, intro, empty=no_data("TAT", filters))
    series: dict[tuple[str, str], list[TatSummaryRow]] = defaultdict(list)
    for r in rows:
        series[(r.where.node, r.where.operator_label)].append(r)
    out = []
    for (node, label), rs in sorted(series.items()):
        if len(rs) < MIN_SAMPLES:
            out.append((node, label, str(len(rs)),
                        f"too few transfers for a verdict (need {MIN_SAMPLES})",
                        "", "", "", "", ""))
            continue
        t = np.array([r.time_ns / 1e9 for r in rs])
        y = np.array([r.mean_bps / MBPS for r in rs])
        res = diurnal(t, y, n_boot=n_boot)
        zone = zones.of(node)
        peak = (res.peak_hour + _utc_offset_h(zone, rs[len(rs) // 2].time_ns)) % 24
        out.append((
            node, label, str(res.n), cycle_verdict(res, float(y.mean())),
            f"{res.p_value:.3f}",
            f"{res.delta_bic:.1f} [{res.delta_bic_ci[0]:.1f}, {res.delta_bic_ci[1]:.1f}]",
            f"{res.amplitude:.2f} [{res.amplitude_ci[0]:.2f}, {res.amplitude_ci[1]:.2f}]",
            f"{_clock(peak)} {'local' if zone is not None else 'UTC'}",
            f"{res.ls_best_period_h:.1f}",
        ))
    table = Table(
        caption="Daily cycle in the TAT rate per node and operator",
        headers=("Node", "Operator", "Transfers", "Daily cycle?", "p-value",
                 "ΔBIC [95 % CI]", "Amplitude (Mbit/s) [95 % CI]", "Peak hour",
                 "Strongest period (h)"),
        rows=tuple(out), css_class="significance")
    return Page("time-of-day", title, intro,
                sections=(Section(heading="Significance", tables=(table,)),),
                notes=zones.utc_note(r.where.node for r in rows))
