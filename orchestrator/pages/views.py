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
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

from orchestrator.analysis.abwtat import PairRow, operator_figures, pair_sessions
from orchestrator.analysis.timeofday import MIN_SAMPLES, DiurnalResult, diurnal
from orchestrator.pages import svg
from orchestrator.pages.data import AbwRow, Filters, TatSummaryRow

MBPS = 1e6  # rates are shown in Mbit/s
HOURS = tuple(f"{h:02d}" for h in range(24))
#: RD beyond this runs off the CDF's right edge: an ABw twice the TAT is already "wrong",
#: and one wild estimate would otherwise squash the interesting 0-1 range.
RD_AXIS_MAX = 2.0


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


def _fmt(v: float, digits: int = 3) -> str:
    return f"{v:.{digits}g}" if math.isfinite(v) else "n/a"


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


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
                        str(len(medians)), _fmt(min(medians)), _fmt(max(medians)),
                        _fmt(100 * swing, 2)))
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


# --- ABw vs TAT -----------------------------------------------------------------------


def abw_tat_page(tat_rows: Sequence[TatSummaryRow], abw_rows: Sequence[AbwRow], *,
                 filters: Filters) -> Page:
    title = "ABw vs TAT"
    intro = ("Each TAT transfer against the nearest run of each ABw tool in its "
             "ABw-TAT-ABw session: the estimate against the achieved rate, and the relative "
             "difference RD = |TAT - ABw| / TAT.")
    if not tat_rows:
        return Page("abw-tat", title, intro, empty=no_data("TAT", filters))
    if not abw_rows:
        return Page("abw-tat", title, intro, empty=no_data("ABw", filters))
    pairs, notes = pair_sessions(tat_rows, abw_rows)
    if not pairs:
        return Page("abw-tat", title, intro, notes=tuple(notes),
                    empty=f"No ABw-TAT sessions to pair for {filters.describe()} yet.")
    groups: dict[tuple[str, str], list[PairRow]] = defaultdict(list)
    for p in pairs:
        groups[(p.where.country or "??", p.where.operator_label)].append(p)
    scatters = []
    for (country, label), ps in sorted(groups.items()):
        methods = sorted({p.method for p in ps})
        series = [svg.XYSeries(
            name=m, points=[(p.tat_bps / MBPS, p.abw_bps / MBPS) for p in ps if p.method == m],
            labels=[f"{m} on {p.where.node}: TAT {p.tat_bps / MBPS:.3g} Mbit/s, ABw "
                    f"{p.abw_bps / MBPS:.3g} Mbit/s, RD {p.rd:.2f}"
                    for p in ps if p.method == m])
            for m in methods]
        chart = svg.scatter(
            chart_id=f"scatter-{slug(country)}-{slug(label)}",
            title=f"{country} / {label}: ABw estimate against TAT",
            desc=f"{len(ps)} TAT-ABw pairs of {label} in {country}; the dashed line is y = x.",
            series=series, x_label="TAT mean rate (Mbit/s)", y_label="ABw estimate (Mbit/s)",
            diagonal=True)
        scatters.append(chart)
    rd_series = [(f"{label} · {m}", [p.rd for p in ps if p.method == m])
                 for (_country, label), ps in sorted(groups.items())
                 for m in sorted({p.method for p in ps})]
    worst = max(p.rd for p in pairs)
    cdf_chart = svg.cdf(
        chart_id="rd-cdf", title="Relative difference RD = |TAT - ABw| / TAT",
        desc=f"Empirical CDF of RD for {len(rd_series)} operator and tool combination(s).",
        series=rd_series, x_label="RD (fraction of TAT)", y_label="Fraction of pairs",
        x_max=RD_AXIS_MAX if worst > RD_AXIS_MAX else None,
        frame=svg.Frame(width=720, height=340))
    if worst > RD_AXIS_MAX:
        notes.append(f"RD axis cut at {RD_AXIS_MAX:g}; the largest RD is {worst:.2f}.")
    sections = (
        Section(heading="ABw estimate against TAT, per country and operator",
                charts=tuple(scatters)),
        Section(heading="Relative difference, latency and volume", charts=(cdf_chart,),
                tables=(pair_table(pairs),)),
    )
    return Page("abw-tat", title, intro, sections=sections, notes=tuple(notes))


def pair_table(pairs: Sequence[PairRow]) -> Table:
    """The page's summary table: per country, operator and ABw tool (also what a
    dataset release's reader recomputes from its tables, docs/open-data.md)."""
    rows = tuple((
        f.country, f.operator, f.method, str(f.pairs),
        _fmt(f.mean_tat_bps / MBPS), _fmt(f.mean_abw_bps / MBPS),
        _fmt(f.mean_rd, 2), _fmt(f.median_rd, 2), _fmt(f.mean_abs_diff_bps / MBPS),
        f"{f.latency_mean_s:.2f} ± {f.latency_sd_s:.2f}", _fmt(f.volume_ratio),
    ) for f in operator_figures(pairs))
    return Table(
        caption="Per country, operator and ABw tool (volume ratio: bytes TAT sent per byte "
                "the ABw tool sent, over the paired runs)",
        headers=PAIR_TABLE_HEADERS, rows=rows, css_class="summary")


#: The columns of the ABw vs TAT page's summary table.
PAIR_TABLE_HEADERS = (
    "Country", "Operator", "ABw tool", "Pairs", "Mean TAT (Mbit/s)", "Mean ABw (Mbit/s)",
    "Mean RD", "Median RD", "Mean |TAT - ABw| (Mbit/s)",
    "ABw latency per estimate (s, mean ± sd)", "Volume ratio TAT/ABw")


# --- time of day ----------------------------------------------------------------------


def _utc_offset_h(zone: tzinfo | None, at_ns: int) -> float:
    if zone is None:
        return 0.0
    offset = datetime.fromtimestamp(at_ns / 1e9, zone).utcoffset()
    return 0.0 if offset is None else offset.total_seconds() / 3600


def _clock(hour: float) -> str:
    minutes = round(hour * 60) % (24 * 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


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
    NavEntry("hourly", "Hourly behaviour",
             "TAT rate by hour of day per operator (box plots).", 10),
    NavEntry("daily", "Daily behaviour",
             "Daily mean TAT rate per operator over a campaign.", 20),
    NavEntry("abw-tat", "ABw vs TAT", "ABw estimates against TAT per country and operator, "
             "the relative-difference CDF, ABw latency and volume ratio.", 30),
    NavEntry("time-of-day", "Time-of-day significance",
             "Daily-cycle test (Lomb-Scargle, differential BIC) per node and operator.", 40),
    NavEntry("abw-proxy", "ABw proxy", "The calibrated TAT proxy per SIM: predicted "
             "against measured TAT with 90 % intervals, their coverage on held-back TATs, "
             "the median absolute error, and bytes spent against an all-TAT campaign "
             "(docs/abw-proxy.md).", 90),
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
