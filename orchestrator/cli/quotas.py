"""``testbed quota``: data caps per SIM and budgets per project."""

from __future__ import annotations

import re
from typing import Any

import click

from orchestrator.cli.client import api
from orchestrator.cli.output import print_data, size

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """``2GB`` -> 2000000000, ``512MiB``, ``1.5 GB``, ``300000``."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise click.BadParameter(f"{text!r}: expected a size such as 2GB, 500MB or 1GiB")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


@click.group()
def quota() -> None:
    """Data caps per SIM and budgets per project."""


@quota.command("set")
@click.argument("node_id")
@click.argument("interface")
@click.option("--cap", required=True, help="monthly cap, e.g. 2GB, 500MB, 1GiB")
@click.option("--reset-day", type=click.IntRange(1, 31), default=1, show_default=True,
              help="day of month the cap resets (node local time)")
@click.option("--margin", type=click.FloatRange(0, 1, max_open=True), default=0.05,
              show_default=True, help="share of the cap kept free of reservations")
@click.pass_context
def quota_set(ctx: click.Context, node_id: str, interface: str, cap: str, reset_day: int,
              margin: float) -> None:
    """Set the monthly data cap of a node's SIM (admin)."""
    out = api(ctx).call(
        "PUT", f"/api/v1/nodes/{node_id}/interfaces/{interface}/quota",
        json={"cap_bytes": parse_bytes(cap), "reset_day": reset_day, "margin": margin})
    print_data(_quota_row(out), ctx.obj["json"], QUOTA_COLUMNS)


QUOTA_COLUMNS = ["node", "interface", "sim", "source", "limit", "used", "reserved",
                 "remaining", "overrun", "period"]


def _quota_row(q: dict[str, Any]) -> dict[str, Any]:
    start, end = q.get("period_start"), q.get("period_end")
    return {
        **q,
        "sim": f"{q.get('operator') or '?'} ({q.get('mcc_mnc') or '?'})",
        **{k: size(q.get(k)) for k in ("limit", "used", "reserved", "remaining", "overrun")},
        "period": f"{start[:10]}..{end[:10]}" if start and end else "-",
    }


@quota.command("list")
@click.pass_context
def quota_list(ctx: click.Context) -> None:
    """Used, reserved, limit and remaining bytes of every SIM and project."""
    out = api(ctx).call("GET", "/api/v1/quotas")
    if ctx.obj["json"]:
        print_data(out, True)
        return
    print_data([_quota_row(q) for q in out["sims"]], False, QUOTA_COLUMNS)
    click.echo()
    rows = [{**p, **{k: size(p.get(k)) if p.get(k) is not None else "unlimited"
                     for k in ("limit", "remaining")},
             **{k: size(p.get(k)) for k in ("used", "reserved", "overrun")}}
            for p in out["projects"]]
    print_data(rows, False, ["project", "limit", "used", "reserved", "remaining", "overrun"])


@quota.command("budget")
@click.argument("project_name")
@click.option("--bytes", "amount", default=None, help="lifetime budget, e.g. 50GB; omit: none")
@click.pass_context
def quota_budget(ctx: click.Context, project_name: str, amount: str | None) -> None:
    """Set (or remove) a project's lifetime data budget (admin)."""
    out = api(ctx).call("PUT", f"/api/v1/projects/{project_name}/budget",
                         json={"budget_bytes": parse_bytes(amount) if amount else None})
    print_data(out, True)

