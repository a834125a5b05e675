"""The short-flows page (pure): completion time against size per operator with the
idealised model, the sensitivity statement, and the time-of-day test per size.

Built from the ``short_flows`` points (:mod:`studies.short_flows.points`); the
figures are :mod:`studies.short_flows.analysis` and
:mod:`orchestrator.analysis.timeofday`. Only flows with status ``ok`` are measured;
excluded ones (SYN or FIN retransmitted) are counted in the table.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from orchestrator.analysis.timeofday import MIN_SAMPLES, diurnal
from orchestrator.study import (
    MBPS,
    Filters,
    Page,
    Readable,
    Section,
    Table,
    TimeSeriesQuery,
    cycle_verdict,
    no_data,
    result_rows,
    select_points,
    slug,
    svg,
    text,
    where_of,
)
from studies.short_flows.analysis import (
    FlowSample,
    Sensitivity,
    base_rtt_s,
    capacity_bps,
    long_rate_bps,
    measured_sensitivity,
    median_fct_by_size,
    model_fct_s,
    model_sensitivity,
)
from studies.short_flows.points import SHORT_FLOWS
from studies.short_flows.rows import ShortFlowRow
from testbed_kit.short_flows import short_sizes

SLUG = "short-flows"
TITLE = "Short-flow completion times"
#: Model points drawn between the measured sizes, so the line shows its round steps.
MODEL_POINTS = 61


def _samples(rows: Sequence[ShortFlowRow]) -> list[FlowSample]:
    return [FlowSample(session=r.run, time_ns=r.time_ns, kind=r.kind, size_bytes=r.size_bytes,
                       fct_s=r.fct_s, rtt_3whs_s=r.rtt_3whs_s)
            for r in rows if r.status == "ok" and r.fct_s is not None and r.fct_s > 0]


def _size_label(log_size: float) -> str:
    size = 10 ** log_size
    return f"{size / 1e3:.0f} kB" if size >= 1e4 else f"{size:,.0f} B"


def _chart(label: str, direction: str, samples: Sequence[FlowSample], rtt: float | None,
           cap: float | None) -> str:
    medians = median_fct_by_size(samples)
    series = [svg.XYSeries(
        "measured (median)",
        [(math.log10(size), fct * 1e3) for size, fct in medians.items()],
        [f"{size:,} B: median {fct * 1e3:.0f} ms" for size, fct in medians.items()])]
    if rtt is not None and cap is not None:
        lo, hi = math.log10(short_sizes()[0]), math.log10(short_sizes()[-1])
        xs = [lo + (hi - lo) * i / (MODEL_POINTS - 1) for i in range(MODEL_POINTS)]
        series.append(svg.XYSeries("model L(S)", [
            (x, model_fct_s(round(10 ** x), rtt_s=rtt, capacity_bps=cap) * 1e3)
            for x in xs]))
    return svg.line_chart(
        chart_id=f"fct-{slug(label)}-{direction}",
        title=f"{label} ({direction}): completion time against size",
        desc=(f"Median flow completion time per size for {label}, and the idealised "
              "slow-start model L(S) from the base RTT and the long flow's rate."),
        series=series, x_label="Flow size (log scale)", y_label="Completion time (ms)",
        x_ticks=[3.0, 4.0, 5.0], x_tick_label=_size_label)


def _pct(x: float | None) -> str:
    return "" if x is None else f"{100 * x:+.1f} %"


def _sensitivity_row(label: str, direction: str, model: Sensitivity | None,
                     measured: Sensitivity | None) -> tuple[str, ...]:
    def verdict(s: Sensitivity | None) -> str:
        if s is None:
            return "not enough sessions"
        return "yes" if s.rtt_hurts_more else "no"
    return (label, direction,
            _pct(model.rtt_up if model else None), _pct(model.capacity_down if model else None),
            verdict(model),
            _pct(measured.rtt_up if measured else None),
            _pct(measured.capacity_down if measured else None), verdict(measured))


def _model_sensitivity(rtt: float | None, cap: float | None) -> Sensitivity | None:
    """The model's sensitivity averaged over the 11 short sizes."""
    if rtt is None or cap is None:
        return None
    each = [model_sensitivity(s, rtt_s=rtt, capacity_bps=cap) for s in short_sizes()]
    return Sensitivity(rtt_up=statistics.fmean(e.rtt_up for e in each),
                       capacity_down=statistics.fmean(e.capacity_down for e in each))


def _tod_rows(label: str, direction: str, samples: Sequence[FlowSample],
              n_boot: int) -> list[tuple[str, ...]]:
    """The daily-cycle test of the long flow's rate and of each size's completion time."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in sorted(samples, key=lambda s: s.time_ns):
        if s.kind == "long":
            series["long-flow rate (Mbit/s)"].append((s.time_ns / 1e9, long_rate_bps(s) / MBPS))
    for size in short_sizes():
        key = f"FCT {size:,} B (ms)"
        series[key] = [(s.time_ns / 1e9, s.fct_s * 1e3) for s in samples
                       if s.kind == "short" and s.size_bytes == size]
    out: list[tuple[str, ...]] = []
    for name, points in series.items():
        if len(points) < MIN_SAMPLES:
            out.append((label, direction, name, str(len(points)),
                        f"too few sessions for a verdict (need {MIN_SAMPLES})", "", "", ""))
            continue
        t = np.array([p[0] for p in points])
        y = np.array([p[1] for p in points])
        res = diurnal(t, y, n_boot=n_boot)
        out.append((label, direction, name, str(res.n), cycle_verdict(res, float(y.mean())),
                    f"{res.p_value:.3f}", f"{res.delta_bic:.1f}",
                    f"{res.amplitude:.3g} [{res.amplitude_ci[0]:.3g}, "
                    f"{res.amplitude_ci[1]:.3g}]"))
    return out


def short_flows_page(rows: Sequence[ShortFlowRow], *, filters: Filters,
                     n_boot: int = 999) -> Page:
    intro = ("Completion time of 11 short flows (1,388 to 327,568 bytes) and a long flow, "
             "each on a fresh TCP connection, from the packet capture (first SYN to the "
             "last data byte ACKed), against the idealised slow-start model L(S) from the "
             "base RTT (median handshake RTT) and the long flow's rate (after Garcia et "
             "al.). Flows with a SYN or FIN retransmission are excluded and counted.")
    if not rows:
        return Page(SLUG, TITLE, intro, empty=no_data("short-flows", filters))
    groups: dict[tuple[str, str], list[ShortFlowRow]] = defaultdict(list)
    for r in rows:
        groups[(r.where.operator_label, r.direction)].append(r)
    charts, summary, sens, tod = [], [], [], []
    for (label, direction), rs in sorted(groups.items()):
        samples = _samples(rs)
        rtt, cap = base_rtt_s(samples), capacity_bps(samples)
        charts.append(_chart(label, direction, samples, rtt, cap))
        status = Counter(r.status for r in rs)
        summary.append((label, direction, str(len({r.run for r in rs})), str(status["ok"]),
                        str(status["excluded"]),
                        str(status["failed"] + status["uncaptured"]),
                        "" if rtt is None else f"{rtt * 1e3:.1f}",
                        "" if cap is None else f"{cap / MBPS:.2f}"))
        sens.append(_sensitivity_row(label, direction, _model_sensitivity(rtt, cap),
                                     measured_sensitivity(samples)))
        tod.extend(_tod_rows(label, direction, samples, n_boot))
    return Page(SLUG, TITLE, intro, sections=(
        Section(heading="Completion time against size", charts=tuple(charts), tables=(Table(
            caption="Flows per operator",
            headers=("Operator", "Direction", "Sessions", "Flows measured",
                     "Excluded (SYN/FIN retransmitted)", "Failed or uncaptured",
                     "Base RTT (ms)", "Long-flow rate (Mbit/s)"),
            rows=tuple(summary), css_class="short-flows-summary"),)),
        Section(heading="Sensitivity: 10 % more RTT against 10 % less capacity",
                text=("How much longer short flows take (mean over the 11 sizes for the "
                      "model; pooled regression of log completion time on log handshake "
                      "RTT and log long-flow rate for the measurements). The reference "
                      "found the RTT increase hurts more."),
                tables=(Table(
                    caption="Sensitivity of short-flow completion time",
                    headers=("Operator", "Direction", "Model: RTT +10 %",
                             "Model: capacity -10 %", "Model: RTT hurts more?",
                             "Measured: RTT +10 %", "Measured: capacity -10 %",
                             "Measured: RTT hurts more?"),
                    rows=tuple(sens), css_class="sensitivity"),)),
        Section(heading="Time of day", text=(
            "A 24 h sinusoid against a constant per series (Lomb-Scargle and ΔBIC, "
            "analysis.timeofday), as on the time-of-day page."), tables=(Table(
                caption="Daily cycle per operator and flow size",
                headers=("Operator", "Direction", "Series", "Sessions", "Daily cycle?",
                         "p-value", "ΔBIC", "Amplitude [95 % CI]"),
                rows=tuple(tod), css_class="significance"),)),
    ))


# --- the page's query ------------------------------------------------------------------


def short_flows_query(filters: Filters) -> str:
    return select_points(SHORT_FLOWS, ("status", "fct_s", "rtt_3whs_s", "size_bytes",
                                       "kind"), filters)


def short_flows(ts: TimeSeriesQuery, filters: Filters, *,
                readable: Readable) -> list[ShortFlowRow]:
    """Every ``short_flows`` point the caller may read, excluded and failed ones too
    (the page counts them)."""
    out = []
    for row in result_rows(ts.query(short_flows_query(filters))):
        if row.get("size_bytes") is None or not readable.run(text(row, "run")):
            continue
        fct, rtt = row.get("fct_s"), row.get("rtt_3whs_s")
        out.append(ShortFlowRow(
            time_ns=int(row["time"]), where=where_of(row), run=text(row, "run"),
            session=text(row, "session"), direction=text(row, "direction"),
            kind=text(row, "kind"), size_bytes=int(row["size_bytes"]),
            status=text(row, "status"), fct_s=None if fct is None else float(fct),
            rtt_3whs_s=None if rtt is None else float(rtt)))
    return out
