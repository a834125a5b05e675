"""``testbed experiment`` and ``testbed run``: the catalogue and measurement runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from orchestrator.cli.client import api
from orchestrator.cli.output import RUN_COLUMNS, print_data
from orchestrator.cli.waiting import wait
from testbed_common import safeyaml
from testbed_common.states import RunState


@click.group()
def experiment() -> None:
    """The experiment catalogue."""


@experiment.command("list")
@click.pass_context
def experiment_list(ctx: click.Context) -> None:
    print_data(
        api(ctx).call("GET", "/api/v1/experiments"),
        ctx.obj["json"],
        ["name", "version", "image", "description"],
    )


@click.group()
def run() -> None:
    """Measurement runs."""


def _params(pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r}: use NAME=VALUE", param_hint="--param")
        try:  # 10 -> int, 0.5 -> float, uplink -> str
            out[key] = safeyaml.load(value, what=f"the value of {key}")
        except safeyaml.YamlRefused as e:
            raise click.BadParameter(str(e), param_hint="--param") from e
    return out


@run.command("submit")
@click.argument("experiment_name")
@click.option("--node", required=True)
@click.option("--interface", required=True)
@click.option("--param", "params", multiple=True, help="NAME=VALUE, repeatable")
@click.option("--project", default="default", show_default=True)
@click.pass_context
def run_submit(
    ctx: click.Context,
    experiment_name: str,
    node: str,
    interface: str,
    params: tuple[str, ...],
    project: str,
) -> None:
    out = api(ctx).call(
        "POST",
        "/api/v1/runs",
        json={
            "experiment": experiment_name,
            "node": node,
            "interface": interface,
            "parameters": _params(params),
            "project": project,
        },
    )
    print_data(out, ctx.obj["json"], RUN_COLUMNS)


@run.command("list")
@click.option("--state", type=click.Choice([s.value for s in RunState]))
@click.option("--node")
@click.option("--campaign")
@click.pass_context
def run_list(ctx: click.Context, state: str | None, node: str | None, campaign: str | None) -> None:
    query = {k: v for k, v in {"state": state, "node": node, "campaign": campaign}.items() if v}
    print_data(api(ctx).call("GET", "/api/v1/runs", params=query), ctx.obj["json"], RUN_COLUMNS)


@run.command("show")
@click.argument("run_id")
@click.pass_context
def run_show(ctx: click.Context, run_id: str) -> None:
    print_data(api(ctx).call("GET", f"/api/v1/runs/{run_id}"), True)


@run.command("cancel")
@click.argument("run_id")
@click.option("--reason", default="cancelled by user")
@click.pass_context
def run_cancel(ctx: click.Context, run_id: str, reason: str) -> None:
    out = api(ctx).call("POST", f"/api/v1/runs/{run_id}/cancel", json={"reason": reason})
    print_data(out, ctx.obj["json"], RUN_COLUMNS)


@run.command("wait")
@click.argument("run_ids", nargs=-1, required=True)
@click.option("--timeout", type=float, default=600.0, show_default=True, help="seconds")
@click.pass_context
def run_wait(ctx: click.Context, run_ids: tuple[str, ...], timeout: float) -> None:
    """Wait until every run is final; exit 1 if any did not end done.

    Also exit 1 when --timeout passes first. Progress goes to stderr: redrawn in place
    on a terminal, plain lines otherwise; the final table (or JSON) goes to stdout."""
    runs = wait(api(ctx), run_ids, timeout_s=timeout)
    print_data(runs, ctx.obj["json"], RUN_COLUMNS)
    if any(r["state"] != RunState.DONE.value for r in runs):
        raise SystemExit(1)


@run.command("download")
@click.argument("run_id")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None)
@click.pass_context
def run_download(ctx: click.Context, run_id: str, output: Path | None) -> None:
    """Download a run's archived bundle (tar.gz)."""
    data = api(ctx).call("GET", f"/api/v1/runs/{run_id}/bundle")
    target = output or Path(f"{run_id}.tar.gz")
    target.write_bytes(data)
    click.echo(f"{target} ({len(data)} bytes)")

