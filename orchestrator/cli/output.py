"""Printing shared by the CLI's commands: tables, JSON, sizes and rates."""

from __future__ import annotations

import json
from typing import Any

import click

from orchestrator.analysis.units import rate_text

RUN_COLUMNS = ["id", "node", "interface", "experiment", "state", "not_before", "reason"]


def print_data(data: Any, as_json: bool, columns: list[str] | None = None) -> None:
    if as_json or columns is None:
        click.echo(json.dumps(data, indent=2, default=str))
        return
    rows = data if isinstance(data, list) else [data]
    table = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [
        max(len(c), *(len(row[i]) for row in table)) if table else len(c)
        for i, c in enumerate(columns)
    ]
    click.echo("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in table:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def print_decisions(decisions: list[dict[str, Any]]) -> None:
    """The planner's decisions: what was not booked, and why."""
    for d in decisions:
        where = f"{d['node']}/{d['interface']}" if d.get("interface") else d.get("node") or "-"
        click.echo(f"  {d['kind']} ({d['code']}) {where}, {d['count']} session(s): "
                   f"{d['message']}")


def rate(bps: Any) -> str:
    return rate_text(bps) or "-"


def size(n: Any) -> str:
    if not isinstance(n, int | float):
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"
