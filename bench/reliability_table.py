"""The fault matrix's table in docs/reliability.md, written from the last run's figures.

Each row's end-to-end test (tests/e2e/test_fault_*.py) records its five figures in
bench/reliability-figures.json when it passes (tests/e2e/audit.py: record()); this
script rewrites the table between the markers in docs/reliability.md from that file,
so the doc shows what the last run measured, never numbers typed by hand. A row with no
figures yet says "not yet run".

    .venv/bin/python bench/reliability_table.py          # rewrite the table
    .venv/bin/python bench/reliability_table.py --check  # exit 1 if the doc is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIGURES = REPO / "bench" / "reliability-figures.json"
DOC = REPO / "docs" / "reliability.md"
BEGIN = "<!-- reliability-table:begin (bench/reliability_table.py writes this) -->"
END = "<!-- reliability-table:end -->"

#: Issue 10's ten rows, as the table names them until a run records its own words.
ROWS: dict[int, str] = {
    1: "agent SIGKILLed mid-run, restarted 30 s later",
    2: "node offline: control link cut while it holds work",
    3: "orchestrator restarted mid-campaign",
    4: "measurement server killed mid-run",
    5: "disk full on the node",
    6: "node clock wrong",
    7: "bundle upload cut halfway, then resumed",
    8: "InfluxDB down while bundles arrive",
    9: "spool survives an agent restart",
    10: "same bundle uploaded twice at once",
}
HEADER = ("| # | fault | runs | results lost | duplicate archives | non-final after recovery "
          "| quota overrun (bytes) | charged vs measured (worst) | what the last run did "
          "| recorded |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def row_line(number: int, figures: Mapping[str, Any] | None) -> str:
    """One table line: the row's recorded figures, or "not yet run"."""
    if figures is None:
        return (f"| {number} | {_cell(ROWS[number])} | | not yet run | | | | | | |")
    error = float(figures.get("charge_error", 0.0))
    return (f"| {number} | {_cell(figures.get('name', ROWS[number]))} | {figures['runs']} "
            f"| {figures['lost']} | {figures['duplicates']} | {figures['non_final']} "
            f"| {figures['overrun_bytes']} | {error:.2%} "
            f"| {_cell(figures.get('fault', ''))} | {figures.get('recorded', '')} |")


def render(figures: Mapping[str, Mapping[str, Any]]) -> str:
    """The whole table for ``figures`` (bench/reliability-figures.json's content)."""
    unknown = sorted(set(figures) - {str(n) for n in ROWS})
    if unknown:
        raise ValueError(f"figures for rows {unknown}, which the matrix does not have "
                         f"(rows are 1-{max(ROWS)})")
    lines = [HEADER] + [row_line(n, figures.get(str(n))) for n in sorted(ROWS)]
    return "\n".join(lines)


def rewrite(doc: str, table: str) -> str:
    """``doc`` with the text between the markers replaced by ``table``."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/reliability.md lacks the markers {BEGIN!r} ... {END!r}; "
                         "put them where the table goes")
    return doc[:start + len(BEGIN)] + "\n" + table + "\n" + doc[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="only check that the doc's table matches the figures")
    args = parser.parse_args(argv)
    figures = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    doc = DOC.read_text()
    new = rewrite(doc, render(figures))
    if args.check:
        if new != doc:
            print(f"{DOC.relative_to(REPO)} is stale: run bench/reliability_table.py",
                  file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    print(f"wrote the table of {DOC.relative_to(REPO)} ({len(figures)} rows recorded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
