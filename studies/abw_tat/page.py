"""The abw-tat study's page (pure): ABw vs TAT, each TAT transfer of an ABw-TAT-ABw
session against the nearest run of each ABw tool (:mod:`orchestrator.analysis.abwtat`
pairs them); :mod:`studies.abw_tat.queries` reads the rows."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from orchestrator.analysis.abwtat import (
    AbwRow,
    PairRow,
    TatSummaryRow,
    operator_figures,
    pair_sessions,
)
from orchestrator.study import MBPS, Filters, Page, Section, Table, fmt, no_data, slug, svg

SLUG = "abw-tat"
#: RD beyond this runs off the CDF's right edge: an ABw twice the TAT is already "wrong",
#: and one wild estimate would otherwise squash the interesting 0-1 range.
RD_AXIS_MAX = 2.0


def abw_tat_page(tat_rows: Sequence[TatSummaryRow], abw_rows: Sequence[AbwRow], *,
                 filters: Filters) -> Page:
    title = "ABw vs TAT"
    intro = ("Each TAT transfer against the nearest run of each ABw tool in its "
             "ABw-TAT-ABw session: the estimate against the achieved rate, and the relative "
             "difference RD = |TAT - ABw| / TAT.")
    if not tat_rows:
        return Page(SLUG, title, intro, empty=no_data("TAT", filters))
    if not abw_rows:
        return Page(SLUG, title, intro, empty=no_data("ABw", filters))
    pairs, notes = pair_sessions(tat_rows, abw_rows)
    if not pairs:
        return Page(SLUG, title, intro, notes=tuple(notes),
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
    return Page(SLUG, title, intro, sections=sections, notes=tuple(notes))


def pair_table(pairs: Sequence[PairRow]) -> Table:
    """The page's summary table: per country, operator and ABw tool (also what a
    dataset release's reader recomputes from its tables, docs/open-data.md)."""
    rows = tuple((
        f.country, f.operator, f.method, str(f.pairs),
        fmt(f.mean_tat_bps / MBPS), fmt(f.mean_abw_bps / MBPS),
        fmt(f.mean_rd, 2), fmt(f.median_rd, 2), fmt(f.mean_abs_diff_bps / MBPS),
        f"{f.latency_mean_s:.2f} ± {f.latency_sd_s:.2f}", fmt(f.volume_ratio),
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
