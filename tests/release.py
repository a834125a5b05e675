"""What the done-means of dataset releases compare: the ABw vs TAT page's summary table
as a page shows it, and the same table recomputed from a release's tables alone."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pyarrow.parquet as pq

from orchestrator.analysis.abwtat import pair_sessions
from studies.abw_tat.page import pair_table
from studies.abw_tat.release import abw_rows, tat_summary_rows


def page_summary(page: str) -> list[tuple[str, ...]]:
    """The rows of the ABw vs TAT page's summary table, as shown."""
    [table] = re.findall(r'<table class="summary">.*?<tbody>(.*?)</tbody>', page, re.S)
    return [tuple(html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S))
            for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]


def recomputed_summary(root: Path) -> list[tuple[str, ...]]:
    """The same table from the release at ``root``: its TAT summaries and ABw estimates,
    paired and summarised by the page's own code."""
    tat = tat_summary_rows(pq.read_table(root / "tables/tat_summaries.parquet").to_pylist())
    abw = abw_rows(pq.read_table(root / "tables/abw_estimates.parquet").to_pylist())
    pairs, _ = pair_sessions(tat, abw)
    return [tuple(row) for row in pair_table(pairs).rows]
