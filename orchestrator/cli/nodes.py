"""``testbed node``: the fleet's nodes."""

from __future__ import annotations

from typing import Any

import click

from orchestrator.cli.client import api
from orchestrator.cli.output import print_data


@click.group()
def node() -> None:
    """Nodes of the fleet."""


NODE_COLUMNS = ["id", "health", "country", "architecture", "interfaces", "last_heartbeat_at",
                "clock_offset_s", "agent_version"]


def _node_row(n: dict[str, Any]) -> dict[str, Any]:
    """A node as ``node list`` shows it; the clock offset (node clock minus the
    orchestrator's, as its agent last estimated it) to the millisecond."""
    ifaces = ",".join(f"{i['name']}:{i['mcc_mnc']}" for i in n.get("interfaces", []))
    offset = n.get("clock_offset_s")
    return {**n, "interfaces": ifaces or "-",
            "clock_offset_s": f"{offset:+.3f}" if offset is not None else "-"}


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
    out = api(ctx).call(
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
        print_data(out, True)
    else:
        click.echo(f"node {node_id} added; its token (shown once):")
        click.echo(out["token"])


@node.command("list")
@click.pass_context
def node_list(ctx: click.Context) -> None:
    data = api(ctx).call("GET", "/api/v1/nodes")
    print_data(data if ctx.obj["json"] else [_node_row(n) for n in data], ctx.obj["json"],
               NODE_COLUMNS)


@node.command("show")
@click.argument("node_id")
@click.pass_context
def node_show(ctx: click.Context, node_id: str) -> None:
    print_data(api(ctx).call("GET", f"/api/v1/nodes/{node_id}"), True)


@node.command("maintenance")
@click.argument("node_id")
@click.argument("state", type=click.Choice(["on", "off"]))
@click.pass_context
def node_maintenance(ctx: click.Context, node_id: str, state: str) -> None:
    out = api(ctx).call(
        "PUT", f"/api/v1/nodes/{node_id}/maintenance", json={"maintenance": state == "on"}
    )
    print_data(_node_row(out), ctx.obj["json"], NODE_COLUMNS)


@node.command("rotate-token")
@click.argument("node_id")
@click.pass_context
def node_rotate_token(ctx: click.Context, node_id: str) -> None:
    """Give a node a new token (admin); the old one stops working at once. Prints the
    new token once: set it as the agent's TESTBED_NODE_TOKEN and restart the agent."""
    out = api(ctx).call("POST", f"/api/v1/nodes/{node_id}/rotate-token")
    if ctx.obj["json"]:
        print_data(out, True)
    else:
        click.echo(f"node {node_id}: old token revoked; its new token (shown once):")
        click.echo(out["token"])

