"""The dashboard pages' pure parts: chart primitives, page models and their HTML."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

import pytest

from orchestrator.analysis.abwtat import pair_sessions
from orchestrator.pages import html, svg, views
from orchestrator.pages.contrib import navigation
from orchestrator.pages.data import AbwRow, Choices, Filters, TatSummaryRow, Where
from orchestrator.pages.queries import where_clause
from orchestrator.timeseries.influx import literal
from studies.abw_tat import page as abw_tat_pages
from studies.tat import page as tat_pages
from studies.tat.queries import tat_summary_query

NS = {"s": "http://www.w3.org/2000/svg"}
T0 = int(datetime(2026, 11, 22, tzinfo=UTC).timestamp()) * 10**9
HOUR_NS = 3600 * 10**9


def parse(svg_text: str) -> ET.Element:
    return ET.fromstring(svg_text)  # well-formed XML, or this raises


def test_nice_domain_covers_the_data_on_round_ticks() -> None:
    assert svg.nice_domain(0, 23.4) == (0, 25, [0, 5, 10, 15, 20, 25])
    lo, hi, ticks = svg.nice_domain(0.013, 0.98)
    assert lo <= 0.013 and hi >= 0.98 and ticks[0] == lo and ticks[-1] == hi
    assert svg.nice_domain(5, 5)[:2] == (4, 6)  # a flat series still gets an axis
    assert svg.nice_domain(0, 0)[:2] == (0, 1)
    assert svg.tick_text(2.5) == "2.5" and svg.tick_text(20.0) == "20"


def test_box_stats_are_tukeys() -> None:
    b = svg.box_stats([1, 2, 3, 4, 5, 6, 7, 8, 100])
    assert b is not None
    assert (b.q1, b.median, b.q3) == (3, 5, 7)
    assert b.high == 8 and b.outliers == (100,)  # 100 is beyond q3 + 1.5 IQR = 13
    single = svg.box_stats([4.0])
    assert single is not None and single.low == single.median == single.high == 4.0
    assert svg.box_stats([]) is None
    assert svg.box_stats([math.nan]) is None


def test_box_plot_draws_one_labelled_box_per_category_with_data() -> None:
    boxes = [svg.box_stats([h, h + 1, h + 2]) if h % 2 else None for h in range(24)]
    root = parse(svg.box_plot(chart_id="c1", title="Telia: rate <by> hour", desc="d",
                              categories=views.HOURS, boxes=boxes, x_label="Hour of day (UTC)",
                              y_label="Rate (Mbit/s)"))
    assert root.get("role") == "img" and root.get("aria-labelledby") == "c1-title c1-desc"
    assert root.find("s:title", NS).text == "Telia: rate <by> hour"  # type: ignore[union-attr]
    drawn = root.findall(".//s:g[@class='box']", NS)
    assert [g.get("data-category") for g in drawn] == [f"{h:02d}" for h in range(1, 24, 2)]
    assert float(drawn[0].get("data-median", "")) == 2.0
    labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")
              if t.get("class") == "axis-label"]
    assert labels == ["Rate (Mbit/s)", "Hour of day (UTC)"]
    with pytest.raises(ValueError, match="per category"):
        svg.box_plot(chart_id="x", title="t", desc="d", categories=["a"], boxes=[],
                     x_label="x", y_label="y")


def test_scatter_line_and_cdf_marks() -> None:
    s = [svg.XYSeries("spruce", [(10, 8), (20, 25)]), svg.XYSeries("pathload", [(5, 5)])]
    root = parse(svg.scatter(chart_id="s", title="t", desc="d", series=s, x_label="TAT",
                             y_label="ABw", diagonal=True))
    points = root.findall(".//s:circle[@class='point']", NS)
    assert len(points) == 3 and {p.get("data-x") for p in points} == {"10", "20", "5"}
    assert root.find(".//s:line[@class='diagonal']", NS) is not None
    assert len(root.findall(".//s:g[@class='legend']/s:text", NS)) == 2

    root = parse(svg.line_chart(chart_id="l", title="t", desc="d", series=s[:1],
                                x_label="Day", y_label="Rate", x_ticks=[10, 20],
                                x_tick_label=lambda x: f"d{x:.0f}"))
    assert len(root.findall(".//s:polyline[@class='line']", NS)) == 1
    assert len(root.findall(".//s:circle[@class='marker']", NS)) == 2

    root = parse(svg.cdf(chart_id="c", title="t", desc="d",
                         series=[("a", [0.1, 0.2, 0.3, 5.0]), ("b", [])], x_label="RD",
                         x_max=2.0))
    [path] = root.findall(".//s:path[@class='cdf']", NS)
    assert path.get("data-n") == "4" and float(path.get("data-median", "")) == 0.25
    xs = [float(v) for v in re.findall(r"H([\d.]+)", path.get("d", ""))]
    assert max(xs) <= svg.Frame().x1  # the value beyond x_max stays inside the plot


def _row(node: str, op: str, hour: int, rate: float, *, session: str = "") -> TatSummaryRow:
    return TatSummaryRow(time_ns=T0 + hour * HOUR_NS, where=Where(node, "SE", op, f"Op {op}"),
                         campaign="c1", run=f"r{node}{op}{hour}", session=session,
                         direction="uplink", mean_bps=rate, sender_bytes=10_000_000)


def test_hourly_medians_use_the_nodes_local_time() -> None:
    rows = [_row("se-01", "240-01", h, 1e6 * (h + 1)) for h in range(24)]
    zones = views.Zones({"se-01": "Europe/Stockholm"})  # UTC+1 in November
    medians = tat_pages.hourly_medians(rows, zones)["Op 240-01 (240-01)"]
    assert medians[1] == 1.0 and medians[0] == 24.0  # 00 UTC is 01 local
    page = tat_pages.hourly_page(rows, zones=zones, filters=Filters(campaign="c1"))
    assert page.notes == () and page.empty is None
    utc = tat_pages.hourly_page(rows, zones=views.Zones({}), filters=Filters())
    assert "their hours and days are UTC" in utc.notes[0]
    assert "Hour of day (UTC)" in utc.sections[0].charts[0]


def test_pages_without_data_say_so_plainly() -> None:
    f = Filters(campaign="c-9")
    for page in (tat_pages.hourly_page([], zones=views.Zones({}), filters=f),
                 tat_pages.daily_page([], zones=views.Zones({}), filters=f),
                 tat_pages.timeofday_page([], zones=views.Zones({}), filters=f),
                 abw_tat_pages.abw_tat_page([], [], filters=f)):
        assert page.empty == "No TAT measurements for campaign c-9 yet."
        assert page.empty in html.page_html(page, filters=f, choices=Choices())
    rows = [_row("se-01", "240-01", 0, 1e6)]
    assert abw_tat_pages.abw_tat_page(rows, [], filters=f).empty == \
        "No ABw measurements for campaign c-9 yet."
    assert Filters().describe() == "the last 30 days"


def test_abw_tat_pairs_each_transfer_with_the_nearest_run_of_each_tool() -> None:
    tat = [_row("se-01", "240-01", 0, 10e6, session="s1"),
           _row("se-01", "240-01", 1, 10e6, session="s1"),
           _row("se-01", "240-01", 5, 10e6)]  # no session: not paired, noted
    where = tat[0].where

    def est(run: str, t_ns: int, bps: float) -> AbwRow:
        return AbwRow(time_ns=t_ns, where=where, campaign="c1", run=run, session="s1",
                      direction="uplink", method="spruce", estimate_bps=bps, latency_s=1.0,
                      bytes=100_000)

    abw = [est("a1", T0 - 60 * 10**9, 8e6), est("a1", T0 - 59 * 10**9, 8e6),
           est("a2", T0 + HOUR_NS + 60 * 10**9, 12e6)]
    pairs, notes = pair_sessions(tat, abw)
    assert sorted(p.rd for p in pairs) == pytest.approx([0.2, 0.2])
    assert {p.abw_bps for p in pairs} == {8e6, 12e6}
    assert notes == ["1 TAT transfer(s) carry no session tag and are not paired."]
    page = abw_tat_pages.abw_tat_page(tat, abw, filters=Filters())
    [table] = page.sections[1].tables
    assert table.rows[0][2:4] == ("spruce", "2")
    assert table.rows[0][-1] == "66.7"  # 2 x 10 MB of TAT against 3 x 100 kB of ABw


def test_time_of_day_table_finds_the_cycle_only_where_there_is_one() -> None:
    loaded = [_row("se-01", "240-01", h, 1e6 * (20 + 8 * math.cos(2 * math.pi * h / 24)))
              for h in range(72)]
    flat = [_row("se-01", "240-02", h, 1e6 * (15 + (h * 7919 % 13) / 13)) for h in range(72)]
    few = [_row("se-02", "240-02", h, 1e6) for h in range(3)]
    # A perfectly regular but tiny cycle (1 % of the mean): significant, not a pattern.
    tiny = [_row("se-03", "240-01", h, 1e6 * (20 + 0.2 * math.cos(2 * math.pi * h / 24)))
            for h in range(72)]
    page = tat_pages.timeofday_page(loaded + flat + few + tiny, zones=views.Zones({}),
                                filters=Filters(), n_boot=199)
    rows = {(r[0], r[1]): r for r in page.sections[0].tables[0].rows}
    assert rows[("se-01", "Op 240-01 (240-01)")][3] == "yes"
    assert rows[("se-01", "Op 240-01 (240-01)")][7] == "00:00 UTC"  # cos peaks at 0 h
    assert rows[("se-01", "Op 240-02 (240-02)")][3] == "no"
    assert "too few" in rows[("se-02", "Op 240-02 (240-02)")][3]
    assert rows[("se-03", "Op 240-01 (240-01)")][3].startswith("no (a regular cycle of 1.0 %")


def test_html_escapes_and_keeps_filters_in_links() -> None:
    f = Filters(campaign="<c&1>", node="se 01")
    page = views.index_page(navigation())
    out = html.page_html(page, filters=f, choices=Choices(campaigns=("<c&1>",)))
    assert "<c&1>" not in out and "&lt;c&amp;1&gt;" not in out  # the index has no form
    assert 'href="/pages/hourly?campaign=%3Cc%261%3E&amp;node=se+01"' in out
    hourly = html.page_html(tat_pages.hourly_page([], zones=views.Zones({}), filters=f),
                            filters=f, choices=Choices(campaigns=("<c&1>",)))
    assert '<option value="&lt;c&amp;1&gt;" selected>' in hourly
    assert "<script" not in hourly


def test_queries_quote_filter_values() -> None:
    assert literal("it's \\ odd") == "'it\\'s \\\\ odd'"
    f = Filters(campaign="c'1", operator="240-01", node="se-01")
    assert where_clause(f) == (""" WHERE "campaign" = 'c\\'1' AND "operator" = '240-01'"""
                               """ AND "node" = 'se-01'""")
    assert where_clause(f, narrow=False) == """ WHERE "campaign" = 'c\\'1'"""
    assert where_clause(Filters()) == " WHERE time >= now() - 30d"
    assert tat_summary_query(Filters(days=3)).startswith('SELECT "mean_bps", ')
