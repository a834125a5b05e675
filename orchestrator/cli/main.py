"""``testbed``: one CLI for operators and researchers.

``serve`` and ``db`` act on the local installation; every other command talks to the
API at ``--url`` / ``TESTBED_URL`` with ``--token`` / ``TESTBED_TOKEN``.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import click
import yaml

from orchestrator.cli.client import ApiClient
from testbed_common.states import FINAL_STATES, RunState


def _print(data: Any, as_json: bool, columns: list[str] | None = None) -> None:
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


@click.group()
@click.option("--url", envvar="TESTBED_URL", default="http://127.0.0.1:8080", show_default=True)
@click.option("--token", envvar="TESTBED_TOKEN", default=None, help="API token (TESTBED_TOKEN)")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.pass_context
def cli(ctx: click.Context, url: str, token: str | None, as_json: bool) -> None:
    """Testbed orchestrator for mobile-broadband measurement."""
    ctx.obj = {"url": url, "token": token, "json": as_json}


def _api(ctx: click.Context) -> ApiClient:
    return ApiClient(ctx.obj["url"], ctx.obj["token"])


@cli.command()
def serve() -> None:
    """Run the orchestrator (settings from TESTBED_* variables)."""
    import uvicorn

    from orchestrator.api.app import create_app
    from orchestrator.settings import Settings

    settings = Settings()
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="info",
        access_log=False,
    )


@cli.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Apply migrations to TESTBED_DATABASE_URL."""
    from orchestrator.settings import Settings
    from orchestrator.store.migrate import upgrade

    upgrade(Settings().database_url)
    click.echo("database at head")


@cli.group()
def timeseries() -> None:
    """The time-series store (derived data, rebuilt from the raw archive)."""


@timeseries.command("rebuild")
@click.option("--campaign", default=None, help="only this campaign's runs")
@click.option("--clean", is_flag=True,
              help="drop the runs' series first: removes points an older conversion wrote "
                   "with other tags or times (heartbeat and quota series stay)")
def timeseries_rebuild(campaign: str | None, clean: bool) -> None:
    """Write every archived run (or one campaign's) into InfluxDB again."""
    from orchestrator.bootstrap import build_context
    from orchestrator.errors import Invalid
    from orchestrator.services.ingest import rebuild
    from orchestrator.settings import Settings
    from orchestrator.timeseries.influx import TimeSeriesError

    ctx = build_context(Settings())
    if ctx.timeseries is None:
        raise click.ClickException("no time-series store configured (TESTBED_INFLUX__URL)")
    try:
        done = rebuild(ctx, ctx.timeseries, campaign=campaign, clean=clean)
    except (TimeSeriesError, Invalid) as e:
        raise click.ClickException(str(e)) from e
    if done.stopped:
        raise click.ClickException(
            f"store unavailable after {done.written_runs} of {done.marked} runs: "
            f"{done.stopped}; run again when it is back (the rest stay marked and the "
            "orchestrator retries)")
    click.echo(f"rebuilt {done.written_runs} of {done.marked} archived runs: "
               f"{done.points} points" + (" (series dropped first)" if clean else ""))


# --- nodes --------------------------------------------------------------------------
@cli.group()
def node() -> None:
    """Nodes of the fleet."""


NODE_COLUMNS = ["id", "health", "country", "interfaces", "last_heartbeat_at", "agent_version"]


def _node_row(n: dict[str, Any]) -> dict[str, Any]:
    ifaces = ",".join(f"{i['name']}:{i['mcc_mnc']}" for i in n.get("interfaces", []))
    return {**n, "interfaces": ifaces or "-"}


@node.command("add")
@click.argument("node_id")
@click.option("--country", required=True)
@click.option("--timezone", default="UTC", show_default=True)
@click.option("--model", default="unknown")
@click.option("--architecture", default="unknown")
@click.option("--mobility", type=click.Choice(["stationary", "mobile"]), default="stationary")
@click.option("--tag", "tags", multiple=True)
@click.pass_context
def node_add(
    ctx: click.Context,
    node_id: str,
    country: str,
    timezone: str,
    model: str,
    architecture: str,
    mobility: str,
    tags: tuple[str, ...],
) -> None:
    """Provision a node; prints its token once (give it to the agent)."""
    out = _api(ctx).call(
        "POST",
        "/api/v1/nodes",
        json={
            "id": node_id,
            "country": country,
            "timezone": timezone,
            "model": model,
            "architecture": architecture,
            "mobility": mobility,
            "tags": list(tags),
        },
    )
    if ctx.obj["json"]:
        _print(out, True)
    else:
        click.echo(f"node {node_id} added; its token (shown once):")
        click.echo(out["token"])


@node.command("list")
@click.pass_context
def node_list(ctx: click.Context) -> None:
    data = _api(ctx).call("GET", "/api/v1/nodes")
    _print(data if ctx.obj["json"] else [_node_row(n) for n in data], ctx.obj["json"], NODE_COLUMNS)


@node.command("show")
@click.argument("node_id")
@click.pass_context
def node_show(ctx: click.Context, node_id: str) -> None:
    _print(_api(ctx).call("GET", f"/api/v1/nodes/{node_id}"), True)


@node.command("maintenance")
@click.argument("node_id")
@click.argument("state", type=click.Choice(["on", "off"]))
@click.pass_context
def node_maintenance(ctx: click.Context, node_id: str, state: str) -> None:
    out = _api(ctx).call(
        "PUT", f"/api/v1/nodes/{node_id}/maintenance", json={"maintenance": state == "on"}
    )
    _print(_node_row(out), ctx.obj["json"], NODE_COLUMNS)


@node.command("rotate-token")
@click.argument("node_id")
@click.pass_context
def node_rotate_token(ctx: click.Context, node_id: str) -> None:
    """Give a node a new token (admin); the old one stops working at once. Prints the
    new token once: set it as the agent's TESTBED_NODE_TOKEN and restart the agent."""
    out = _api(ctx).call("POST", f"/api/v1/nodes/{node_id}/rotate-token")
    if ctx.obj["json"]:
        _print(out, True)
    else:
        click.echo(f"node {node_id}: old token revoked; its new token (shown once):")
        click.echo(out["token"])


# --- users and projects ---------------------------------------------------------------
@cli.group()
def user() -> None:
    """Users and their API tokens."""


@user.command("add")
@click.argument("name")
@click.option("--admin", is_flag=True)
@click.option("--project", "projects", multiple=True)
@click.option("--days", type=float, default=None, help="token lifetime in days")
@click.pass_context
def user_add(
    ctx: click.Context, name: str, admin: bool, projects: tuple[str, ...], days: float | None
) -> None:
    out = _api(ctx).call(
        "POST",
        "/api/v1/users",
        json={"name": name, "is_admin": admin, "projects": list(projects), "token_days": days},
    )
    _print(out, True)


@user.command("token")
@click.argument("name")
@click.option("--days", type=float, default=None, help="token lifetime in days")
@click.pass_context
def user_token(ctx: click.Context, name: str, days: float | None) -> None:
    """Issue another API token for a user (admin); shown once."""
    _print(_api(ctx).call("POST", f"/api/v1/users/{name}/tokens", json={"token_days": days}),
           True)


@user.command("tokens")
@click.argument("name")
@click.pass_context
def user_tokens(ctx: click.Context, name: str) -> None:
    """A user's API tokens: ids, expiry, whether revoked (never the secrets)."""
    _print(_api(ctx).call("GET", f"/api/v1/users/{name}/tokens"), ctx.obj["json"],
           ["id", "user", "created_at", "expires_at", "revoked"])


@user.command("revoke")
@click.argument("name")
@click.option("--token", "token_id", type=int, default=None,
              help="revoke only this token id (see `testbed user tokens NAME`)")
@click.pass_context
def user_revoke(ctx: click.Context, name: str, token_id: int | None) -> None:
    """Revoke a user's API tokens and pages sign-ins (or one token); at once."""
    api = _api(ctx)
    if token_id is not None:
        out = api.call("DELETE", f"/api/v1/users/{name}/tokens/{token_id}")
        message = f"token {token_id} of {name} revoked"
    else:
        out = api.call("DELETE", f"/api/v1/users/{name}/tokens")
        message = (f"{name}: {out['tokens']} token(s) and {out['sessions']} pages "
                   "sign-in(s) revoked")
    if ctx.obj["json"]:
        _print(out, True)
    else:
        click.echo(message)


@cli.group()
def project() -> None:
    """Projects."""


@project.command("add")
@click.argument("name")
@click.pass_context
def project_add(ctx: click.Context, name: str) -> None:
    _print(_api(ctx).call("POST", "/api/v1/projects", json={"name": name}), True)


# --- experiments, runs, campaigns -------------------------------------------------------
@cli.group()
def experiment() -> None:
    """The experiment catalogue."""


@experiment.command("list")
@click.pass_context
def experiment_list(ctx: click.Context) -> None:
    _print(
        _api(ctx).call("GET", "/api/v1/experiments"),
        ctx.obj["json"],
        ["name", "version", "image", "description"],
    )


@cli.group()
def run() -> None:
    """Measurement runs."""


RUN_COLUMNS = ["id", "node", "interface", "experiment", "state", "not_before", "reason"]


def _params(pairs: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r}: use NAME=VALUE", param_hint="--param")
        out[key] = yaml.safe_load(value)  # 10 -> int, 0.5 -> float, uplink -> str
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
    out = _api(ctx).call(
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
    _print(out, ctx.obj["json"], RUN_COLUMNS)


@run.command("list")
@click.option("--state", type=click.Choice([s.value for s in RunState]))
@click.option("--node")
@click.option("--campaign")
@click.pass_context
def run_list(ctx: click.Context, state: str | None, node: str | None, campaign: str | None) -> None:
    query = {k: v for k, v in {"state": state, "node": node, "campaign": campaign}.items() if v}
    _print(_api(ctx).call("GET", "/api/v1/runs", params=query), ctx.obj["json"], RUN_COLUMNS)


@run.command("show")
@click.argument("run_id")
@click.pass_context
def run_show(ctx: click.Context, run_id: str) -> None:
    _print(_api(ctx).call("GET", f"/api/v1/runs/{run_id}"), True)


@run.command("cancel")
@click.argument("run_id")
@click.option("--reason", default="cancelled by user")
@click.pass_context
def run_cancel(ctx: click.Context, run_id: str, reason: str) -> None:
    out = _api(ctx).call("POST", f"/api/v1/runs/{run_id}/cancel", json={"reason": reason})
    _print(out, ctx.obj["json"], RUN_COLUMNS)


@run.command("wait")
@click.argument("run_ids", nargs=-1, required=True)
@click.option("--timeout", type=float, default=600.0, show_default=True, help="seconds")
@click.pass_context
def run_wait(ctx: click.Context, run_ids: tuple[str, ...], timeout: float) -> None:
    """Wait until every run is final; exit 1 if any did not end done."""
    api = _api(ctx)
    end = time.monotonic() + timeout
    final = {s.value for s in FINAL_STATES}
    while True:
        runs = [api.call("GET", f"/api/v1/runs/{r}") for r in run_ids]
        if all(r["state"] in final for r in runs) or time.monotonic() > end:
            break
        time.sleep(2)
    _print(runs, ctx.obj["json"], RUN_COLUMNS)
    if any(r["state"] != RunState.DONE.value for r in runs):
        raise SystemExit(1)


@run.command("download")
@click.argument("run_id")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None)
@click.pass_context
def run_download(ctx: click.Context, run_id: str, output: Path | None) -> None:
    """Download a run's archived bundle (tar.gz)."""
    data = _api(ctx).call("GET", f"/api/v1/runs/{run_id}/bundle")
    target = output or Path(f"{run_id}.tar.gz")
    target.write_bytes(data)
    click.echo(f"{target} ({len(data)} bytes)")


def _rate(bps: Any) -> str:
    return f"{bps / 1e6:.2f} Mbit/s" if isinstance(bps, int | float) else "-"


@cli.command("results")
@click.argument("campaign_id")
@click.pass_context
def results_cmd(ctx: click.Context, campaign_id: str) -> None:
    """Key figures of every finished run of a campaign."""
    api = _api(ctx)
    runs = api.call("GET", f"/api/v1/campaigns/{campaign_id}")["runs"]
    nodes = {n["id"]: n for n in api.call("GET", "/api/v1/nodes")}
    rows = []
    for r in runs:
        result = api.call("GET", f"/api/v1/runs/{r['id']}/result") if r["bundle_sha256"] else {}
        iface = {i["name"]: i for i in nodes.get(r["node"], {}).get("interfaces", [])}
        op = iface.get(r["interface"], {})
        # tat: its mean; abw-tat: the session's TAT mean, ABw mean, RD and volume ratio
        summary = result.get("summary") or {}
        ratio = summary.get("volume_ratio_iface")
        rows.append(
            {
                "run": r["id"],
                "node": r["node"],
                "interface": r["interface"],
                "operator": f"{op.get('operator', '?')} ({op.get('mcc_mnc', '?')})",
                "experiment": r["experiment"],
                "state": r["state"],
                "tat": _rate(result.get("mean_bps", summary.get("tat_mean_bps"))),
                "abw": _rate(summary.get("abw_mean_bps")),
                "rd": f"{summary['rd']:.1%}" if summary.get("rd") is not None else "-",
                "tat/abw bytes": f"{ratio:.1f}" if ratio else "-",
                "bytes": result.get("bytes", summary.get("tat_iface_bytes", "-")),
            }
        )
    _print(
        rows,
        ctx.obj["json"],
        ["run", "node", "interface", "operator", "experiment", "state", "tat", "abw", "rd",
         "tat/abw bytes", "bytes"],
    )


@cli.group()
def campaign() -> None:
    """Campaigns."""


@campaign.command("submit")
@click.argument("spec", type=click.File("r"))
@click.pass_context
def campaign_submit(ctx: click.Context, spec: Any) -> None:
    """Submit a campaign from a YAML file."""
    body = yaml.safe_load(spec.read())
    out = _api(ctx).call("POST", "/api/v1/campaigns", json=body)
    if ctx.obj["json"]:
        _print(out, True)
        return
    click.echo(f"campaign {out['id']} ({out['name']}): {len(out['runs'])} runs booked")
    _print_decisions(out.get("decisions", []))
    _print(out["runs"], False, RUN_COLUMNS)


def _print_decisions(decisions: list[dict[str, Any]]) -> None:
    """The planner's decisions: what was not booked, and why."""
    for d in decisions:
        where = f"{d['node']}/{d['interface']}" if d.get("interface") else d.get("node") or "-"
        click.echo(f"  {d['kind']} ({d['code']}) {where}, {d['count']} session(s): "
                   f"{d['message']}")


@campaign.command("list")
@click.option("--limit", type=int, default=100, show_default=True)
@click.pass_context
def campaign_list(ctx: click.Context, limit: int) -> None:
    """The newest campaigns: runs by state, and why sessions were not booked."""
    out = _api(ctx).call("GET", "/api/v1/campaigns", params={"limit": limit})
    if ctx.obj["json"]:
        _print(out, True)
        return
    for c in out:
        runs = ", ".join(f"{n} {state}" for state, n in sorted(c["runs"].items())) or "no runs"
        cancelled = f"; {c['cancel_reason']}" if c.get("cancelled_at") else ""
        click.echo(f"{c['id']} ({c['name']}), project {c['project']}: {runs}{cancelled}")
        _print_decisions(c["decisions"])


@campaign.command("show")
@click.argument("campaign_id")
@click.pass_context
def campaign_show(ctx: click.Context, campaign_id: str) -> None:
    """A campaign's runs and the planner's decisions (deferred, skipped, rejected)."""
    out = _api(ctx).call("GET", f"/api/v1/campaigns/{campaign_id}")
    if ctx.obj["json"]:
        _print(out, True)
        return
    click.echo(f"campaign {out['id']} ({out['name']}), project {out['project']}, "
               f"planned {out.get('planned_at') or 'never'}")
    decisions = out.get("decisions", [])
    click.echo(f"{len(out['runs'])} runs booked; {len(decisions)} decision(s)")
    _print_decisions(decisions)
    _print(out["runs"], False, RUN_COLUMNS)


@campaign.command("cancel")
@click.argument("campaign_id")
@click.pass_context
def campaign_cancel(ctx: click.Context, campaign_id: str) -> None:
    """Stop a campaign: no more bookings, its runs not yet started cancelled (their
    quota released); started and finished runs and their data are kept."""
    out = _api(ctx).call("POST", f"/api/v1/campaigns/{campaign_id}/cancel")
    if ctx.obj["json"]:
        _print(out, True)
        return
    states: dict[str, int] = {}
    for r in out["runs"]:
        states[r["state"]] = states.get(r["state"], 0) + 1
    runs = ", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "no runs"
    click.echo(f"campaign {out['id']} ({out['name']}): {out['cancel_reason']} at "
               f"{out['cancelled_at']}; its runs: {runs}")


@campaign.command("delete")
@click.argument("campaign_id")
@click.pass_context
def campaign_delete(ctx: click.Context, campaign_id: str) -> None:
    """Cancel a campaign without data and hide it (one with data: cancel it instead)."""
    _api(ctx).call("DELETE", f"/api/v1/campaigns/{campaign_id}")
    click.echo(f"campaign {campaign_id} deleted")


@campaign.command("replan")
@click.pass_context
def campaign_replan(ctx: click.Context) -> None:
    """Re-plan every campaign now (admin; the orchestrator also does it on a timer)."""
    out = _api(ctx).call("POST", "/api/v1/plan")
    if ctx.obj["json"]:
        _print(out, True)
        return
    click.echo(f"planned {out['campaigns']} campaign(s): {out['runs_booked']} run(s) booked, "
               f"{out['decisions']} decision(s)")


# --- quotas ---------------------------------------------------------------------------
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """``2GB`` -> 2000000000, ``512MiB``, ``1.5 GB``, ``300000``."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise click.BadParameter(f"{text!r}: expected a size such as 2GB, 500MB or 1GiB")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _size(n: Any) -> str:
    if not isinstance(n, int | float):
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


@cli.group()
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
    out = _api(ctx).call(
        "PUT", f"/api/v1/nodes/{node_id}/interfaces/{interface}/quota",
        json={"cap_bytes": parse_bytes(cap), "reset_day": reset_day, "margin": margin})
    _print(_quota_row(out), ctx.obj["json"], QUOTA_COLUMNS)


QUOTA_COLUMNS = ["node", "interface", "sim", "source", "limit", "used", "reserved",
                 "remaining", "overrun", "period"]


def _quota_row(q: dict[str, Any]) -> dict[str, Any]:
    start, end = q.get("period_start"), q.get("period_end")
    return {
        **q,
        "sim": f"{q.get('operator') or '?'} ({q.get('mcc_mnc') or '?'})",
        **{k: _size(q.get(k)) for k in ("limit", "used", "reserved", "remaining", "overrun")},
        "period": f"{start[:10]}..{end[:10]}" if start and end else "-",
    }


@quota.command("list")
@click.pass_context
def quota_list(ctx: click.Context) -> None:
    """Used, reserved, limit and remaining bytes of every SIM and project."""
    out = _api(ctx).call("GET", "/api/v1/quotas")
    if ctx.obj["json"]:
        _print(out, True)
        return
    _print([_quota_row(q) for q in out["sims"]], False, QUOTA_COLUMNS)
    click.echo()
    rows = [{**p, **{k: _size(p.get(k)) if p.get(k) is not None else "unlimited"
                     for k in ("limit", "remaining")},
             **{k: _size(p.get(k)) for k in ("used", "reserved", "overrun")}}
            for p in out["projects"]]
    _print(rows, False, ["project", "limit", "used", "reserved", "remaining", "overrun"])


@quota.command("budget")
@click.argument("project_name")
@click.option("--bytes", "amount", default=None, help="lifetime budget, e.g. 50GB; omit: none")
@click.pass_context
def quota_budget(ctx: click.Context, project_name: str, amount: str | None) -> None:
    """Set (or remove) a project's lifetime data budget (admin)."""
    out = _api(ctx).call("PUT", f"/api/v1/projects/{project_name}/budget",
                         json={"budget_bytes": parse_bytes(amount) if amount else None})
    _print(out, True)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
