"""docs/reliability.md's table, rendered from the rows' recorded figures."""

from __future__ import annotations

import pytest

from bench.reliability_table import BEGIN, END, ROWS, render, rewrite


def test_recorded_rows_show_their_figures_and_the_rest_say_not_yet_run() -> None:
    table = render({"7": {"name": "upload cut", "runs": 1, "lost": 0, "duplicates": 0,
                          "non_final": 0, "overrun_bytes": 0, "charge_error": 0.0123,
                          "fault": "cut for 20 s | resumed", "recorded": "2026-11-25"}})
    lines = table.splitlines()
    assert len(lines) == 2 + len(ROWS)
    assert lines[2 + 6] == ("| 7 | upload cut | 1 | 0 | 0 | 0 | 0 | 1.23% "
                            "| cut for 20 s \\| resumed | 2026-11-25 |")
    assert "not yet run" in lines[2] and ROWS[1] in lines[2]


def test_figures_for_a_row_the_matrix_lacks_are_refused() -> None:
    with pytest.raises(ValueError, match=r"rows \['11'\]"):
        render({"11": {}})


def test_only_the_text_between_the_markers_is_replaced() -> None:
    doc = f"intro\n{BEGIN}\nold table\n{END}\noutro\n"
    assert rewrite(doc, "new") == f"intro\n{BEGIN}\nnew\n{END}\noutro\n"
    with pytest.raises(ValueError, match="lacks the markers"):
        rewrite("no markers", "new")
