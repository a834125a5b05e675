"""The ABw proxy page (studies/abw_proxy/page.py) on synthetic SIM histories:
its table's coverage, error and bytes as a user reads them, and its chart's intervals."""

from __future__ import annotations

import re

from orchestrator.analysis.proxy import Signals
from orchestrator.analysis.proxy_data import Cheap, RunCost, SimHistory, SimId
from orchestrator.pages.data import Choices, Filters
from orchestrator.pages.html import page_html
from studies.abw_proxy.page import abw_proxy_page, sim_figures
from tests.pagetables import table_rows
from tests.unit.test_analysis_proxy import sim_history

HOUR = 3600.0
TELIA = SimId("se-01", "240-01", "Telia")
TELENOR = SimId("no-01", "242-01", "Telenor")


def history(sim: SimId, seed: int, n_tats: int, n_cheap: int) -> SimHistory:
    """``n_tats`` hourly TATs (a full session each, 25 MB), then ``n_cheap`` cheap
    sessions (3 MB each) an hour apart."""
    obs = sim_history(seed, n_tats)
    h = SimHistory(sim, observations=obs)
    h.runs = [RunCost(f"t{i}", o.time_s, True, 25_000_000) for i, o in enumerate(obs)]
    for k in range(n_cheap):
        t = (n_tats + k) * HOUR
        h.cheap.append(Cheap(t, f"c{k}", Signals(abw_bps=(8e6, 8.2e6))))
        h.runs.append(RunCost(f"c{k}", t, False, 3_000_000))
    return h


def test_the_table_shows_coverage_error_and_bytes_per_sim_and_pooled() -> None:
    hists = {TELIA: history(TELIA, 1, 40, 0), TELENOR: history(TELENOR, 2, 12, 36)}
    page = abw_proxy_page(hists, filters=Filters(campaign="c1"))
    html = page_html(page, filters=Filters(campaign="c1"), choices=Choices())
    rows = {r[0]: r for r in table_rows(html, "abw-proxy")}
    assert set(rows) == {"se-01 Telia (240-01)", "no-01 Telenor (242-01)", "All SIMs"}
    telia, telenor, pooled = (rows["se-01 Telia (240-01)"], rows["no-01 Telenor (242-01)"],
                              rows["All SIMs"])
    assert telia[1] == "31" and telenor[1] == "3"  # TATs from the 10th on
    fig, _, _ = sim_figures(hists[TELIA])
    assert telia[2] == f"{fig.covered} of 31" and 0.8 <= fig.covered / 31 <= 1
    assert pooled[1] == "34"
    # Bytes: Telenor spent 12 x 25 + 36 x 3 MB against 48 windows of 25 MB.
    assert telenor[6:11] == ["12", "36", "408.0", "1200.0", "34.0"]
    assert telia[6:11] == ["40", "0", "1000.0", "1000.0", "100.0"]
    assert pooled[8:11] == ["1408.0", "2200.0", "64.0"]
    assert float(telia[4]) > 0 and 0 < float(telia[5]) < 30


def test_the_chart_draws_each_held_back_tat_in_or_out_of_its_interval() -> None:
    h = history(TELENOR, 3, 20, 5)
    _, points, scored = sim_figures(h)
    assert len(points) == 11 + 5 and len(scored) == 11
    html = abw_proxy_page({TELENOR: h}, filters=Filters(campaign="c1")).sections[1].charts[0]
    marks = re.findall(r'<g class="interval"([^>]*)>', html)
    assert len(marks) == 16
    covered = [m for m in marks if 'data-covered="true"' in m]
    outside = [m for m in marks if 'data-covered="false"' in m]
    assert len(covered) + len(outside) == 11
    assert len(covered) == sum(s.prediction.covers(s.measured_bps) for s in scored)
    for m in marks:
        low, pred, high = (float(re.search(rf'data-{k}="([^"]+)"', m).group(1))  # type: ignore[union-attr]
                           for k in ("low", "predicted", "high"))
        assert 0 < low < pred < high


def test_without_a_campaign_or_data_the_page_says_what_to_do() -> None:
    assert "Choose a campaign" in (abw_proxy_page({}, filters=Filters()).empty or "")
    empty = abw_proxy_page({}, filters=Filters(campaign="c9")).empty or ""
    assert "No ABw-TAT-ABw measurements for campaign c9" in empty
