"""The first-transfer page from rows made by hand: one box per D of the transfers after
the first, each run's g1 marked over its box, and the run table's verdict."""

from __future__ import annotations

import re

from orchestrator.pages.data import Filters, Where
from studies.goodput_sequence.page import GoodputRow, goodput_page, run_figures, size_label

TIM = Where(node="it-01", country="IT", operator="222-01", operator_name="TIM")


def run(name: str, size: int, g1: float, rest: list[float]) -> list[GoodputRow]:
    return [GoodputRow(time_ns=i, where=TIM, campaign="c", run=name, direction="downlink",
                       size_bytes=size, index=i + 1, goodput_bps=g)
            for i, g in enumerate([g1, *rest])]


REST = [4e6, 4.2e6, 3.9e6, 4.1e6, 4.05e6, 3.95e6, 4.3e6, 3.8e6]


def test_boxes_per_size_with_g1_marked() -> None:
    rows = run("r1", 4096, 0.5e6, REST) + run("r2", 262144, 3.5e6, REST) + \
        run("r3", 262144, 4.0e6, REST)
    page = goodput_page(rows, filters=Filters())
    [chart] = page.sections[0].charts
    assert re.findall(r'class="box" data-category="([^"]+)"', chart) == ["4 KB", "256 KB"]
    marks = re.findall(r'class="mark" data-category="([^"]+)" data-value="([^"]+)"', chart)
    assert marks == [("4 KB", "0.5"), ("256 KB", "3.5"), ("256 KB", "4")]
    [table] = page.sections[1].tables
    verdicts = {r[0]: r[-1] for r in table.rows}
    assert verdicts == {"r1": "yes", "r2": "yes", "r3": "no"}


def test_runs_with_too_few_transfers_are_noted() -> None:
    rows = run("r1", 4096, 0.5e6, REST[:3])
    figures, notes = run_figures(rows)
    assert figures == [] and "run r1: 4 transfers stored" in notes[0]
    page = goodput_page(rows, filters=Filters(campaign="c"))
    assert page.empty is not None and "No complete goodput-sequence runs" in page.empty
    assert goodput_page([], filters=Filters()).empty is not None


def test_size_labels() -> None:
    assert [size_label(s) for s in (4096, 1048576, 1500)] == ["4 KB", "1 MB", "1500 B"]
