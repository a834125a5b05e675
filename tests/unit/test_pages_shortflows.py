"""The short-flows page (pure): completion time against size per operator with the
model line, the exclusions counted, the sensitivity and the time-of-day verdicts."""

from __future__ import annotations

import math
import re

from orchestrator.analysis.abwtat import Where
from orchestrator.pages.data import Choices, Filters
from orchestrator.pages.html import page_html
from studies.short_flows.analysis import model_fct_s
from studies.short_flows.page import short_flows_page
from studies.short_flows.rows import ShortFlowRow
from testbed_kit.short_flows import short_sizes
from tests.pagetables import table_rows

HOUR_NS = 3600 * 10**9
LOADED = Where("no-01", "NO", "242-01", "Telenor")
FLAT = Where("se-01", "SE", "240-01", "Telia")
LONG = 2_000_000


def _day(where: Where, *, diurnal: bool) -> list[ShortFlowRow]:
    """A session every 2 h for a day; the loaded operator's capacity dips in the
    evening (55 % at 20:00), the flat one's does not move."""
    rows = []
    for i in range(12):
        hour = 2 * i
        factor = 1 - 0.45 * (1 + math.cos(2 * math.pi * (hour - 20) / 24)) / 2 if diurnal else 1
        rtt, cap = 0.04 * (1 + 0.01 * (i % 3)), 10e6 * factor * (1 + 0.01 * (i % 2))
        run = f"{where.node}-{i}"
        t0 = hour * HOUR_NS
        for j, size in enumerate([*short_sizes(), LONG]):
            fct = model_fct_s(size, rtt_s=rtt, capacity_bps=cap)
            status = "excluded" if (i, j) == (3, 2) else "ok"
            rows.append(ShortFlowRow(
                time_ns=t0 + j * 10**9, where=where, run=run, session=run,
                direction="downlink", kind="long" if j == 11 else "short",
                size_bytes=size, status=status, fct_s=fct, rtt_3whs_s=rtt))
    return rows


def test_each_operator_gets_its_sizes_and_the_model_line() -> None:
    page = short_flows_page([*_day(LOADED, diurnal=True), *_day(FLAT, diurnal=False)],
                            filters=Filters(), n_boot=199)
    html = page_html(page, filters=Filters(), choices=Choices())
    for where in (LOADED, FLAT):
        chart = re.search(rf'<svg[^>]*id="fct-{where.operator_name.lower()}[^"]*"(.*?)</svg>',
                          html, flags=re.S)
        assert chart, where
        measured = re.search(r'data-series="measured \(median\)"(.*?)</g>', chart.group(1),
                             flags=re.S)
        assert measured and measured.group(1).count('class="marker"') == 11
        assert 'data-series="model L(S)"' in chart.group(1)
    summary = {r[0]: r for r in table_rows(html, "short-flows-summary")}
    telenor = summary["Telenor (242-01)"]
    assert telenor[2:6] == ["12", str(12 * 12 - 1), "1", "0"]  # one excluded flow
    sens = table_rows(html, "sensitivity")
    assert all(r[4] == "yes" for r in sens)  # the model: RTT hurts short flows more
    tod = {(r[0], r[2]): r[4] for r in table_rows(html, "significance")}
    assert tod[("Telenor (242-01)", "long-flow rate (Mbit/s)")] == "yes"
    assert tod[("Telia (240-01)", "long-flow rate (Mbit/s)")].startswith("no")
    assert sum(1 for (op, _) in tod if op == "Telia (240-01)") == 12  # long flow + 11 sizes


def test_no_points_say_so() -> None:
    page = short_flows_page([], filters=Filters(campaign="c-1"))
    assert page.empty is not None and "short-flows" in page.empty
