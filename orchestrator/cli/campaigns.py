"""``testbed campaign`` and ``testbed results``: campaigns and their key figures."""

from __future__ import annotations

from typing import Any

import click

from orchestrator.cli.client import api
from orchestrator.cli.output import RUN_COLUMNS, print_data, print_decisions
from testbed_common import safeyaml


@click.command("results")
@click.argument("campaign_id")
@click.pass_context
def results_cmd(ctx: click.Context, campaign_id: str) -> None:
    """Key figures of every finished run of a campaign."""
    # the studies (and the SDK they import) load only for this command: the CLI's other
    # commands start without them
    from orchestrator.cli.results import BYTES, figures, installed_columns, study_headers

    client = api(ctx)
    runs = client.call("GET", f"/api/v1/campaigns/{campaign_id}")["runs"]
    nodes = {n["id"]: n for n in client.call("GET", "/api/v1/nodes")}
    columns = installed_columns()
    rows = []
    for r in runs:
        result = client.call("GET", f"/api/v1/runs/{r['id']}/result") if r["bundle_sha256"] else {}
        iface = {i["name"]: i for i in nodes.get(r["node"], {}).get("interfaces", [])}
        op = iface.get(r["interface"], {})
        rows.append(
            {
                "run": r["id"],
                "node": r["node"],
                "interface": r["interface"],
                "operator": f"{op.get('operator', '?')} ({op.get('mcc_mnc', '?')})",
                "experiment": r["experiment"],
                "state": r["state"],
                # what the run's result means: its study's figures (cli.results)
                **figures(result, columns),
            }
        )
    print_data(
        rows,
        ctx.obj["json"],
        ["run", "node", "interface", "operator", "experiment", "state",
         *study_headers(columns), BYTES],
    )


@click.group()
def campaign() -> None:
    """Campaigns."""


@campaign.command("submit")
@click.argument("spec", type=click.File("r"))
@click.pass_context
def campaign_submit(ctx: click.Context, spec: Any) -> None:
    """Submit a campaign from a YAML file."""
    try:
        body = safeyaml.load(spec.read(), what=f"campaign spec {spec.name}")
    except safeyaml.YamlRefused as e:
        raise click.BadParameter(str(e), param_hint="SPEC") from e
    out = api(ctx).call("POST", "/api/v1/campaigns", json=body)
    if ctx.obj["json"]:
        print_data(out, True)
        return
    click.echo(f"campaign {out['id']} ({out['name']}): {len(out['runs'])} runs booked")
    print_decisions(out.get("decisions", []))
    print_data(out["runs"], False, RUN_COLUMNS)


@campaign.command("list")
@click.option("--limit", type=int, default=100, show_default=True)
@click.pass_context
def campaign_list(ctx: click.Context, limit: int) -> None:
    """The newest campaigns: runs by state, and why sessions were not booked."""
    out = api(ctx).call("GET", "/api/v1/campaigns", params={"limit": limit})
    if ctx.obj["json"]:
        print_data(out, True)
        return
    for c in out:
        runs = ", ".join(f"{n} {state}" for state, n in sorted(c["runs"].items())) or "no runs"
        cancelled = f"; {c['cancel_reason']}" if c.get("cancelled_at") else ""
        click.echo(f"{c['id']} ({c['name']}), project {c['project']}: {runs}{cancelled}")
        print_decisions(c["decisions"])


@campaign.command("show")
@click.argument("campaign_id")
@click.pass_context
def campaign_show(ctx: click.Context, campaign_id: str) -> None:
    """A campaign's runs and the planner's decisions (deferred, skipped, rejected)."""
    out = api(ctx).call("GET", f"/api/v1/campaigns/{campaign_id}")
    if ctx.obj["json"]:
        print_data(out, True)
        return
    click.echo(f"campaign {out['id']} ({out['name']}), project {out['project']}, "
               f"planned {out.get('planned_at') or 'never'}")
    decisions = out.get("decisions", [])
    click.echo(f"{len(out['runs'])} runs booked; {len(decisions)} decision(s)")
    print_decisions(decisions)
    print_data(out["runs"], False, RUN_COLUMNS)


@campaign.command("cancel")
@click.argument("campaign_id")
@click.pass_context
def campaign_cancel(ctx: click.Context, campaign_id: str) -> None:
    """Stop a campaign: no more bookings, its runs not yet started cancelled (their
    quota released); started and finished runs and their data are kept."""
    out = api(ctx).call("POST", f"/api/v1/campaigns/{campaign_id}/cancel")
    if ctx.obj["json"]:
        print_data(out, True)
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
    api(ctx).call("DELETE", f"/api/v1/campaigns/{campaign_id}")
    click.echo(f"campaign {campaign_id} deleted")


@campaign.command("replan")
@click.pass_context
def campaign_replan(ctx: click.Context) -> None:
    """Re-plan every campaign now (admin; the orchestrator also does it on a timer)."""
    out = api(ctx).call("POST", "/api/v1/plan")
    if ctx.obj["json"]:
        print_data(out, True)
        return
    click.echo(f"planned {out['campaigns']} campaign(s): {out['runs_booked']} run(s) booked, "
               f"{out['decisions']} decision(s)")

