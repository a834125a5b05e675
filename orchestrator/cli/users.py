"""``testbed user`` and ``testbed project``: who may use the testbed."""

from __future__ import annotations

import click

from orchestrator.cli.client import api
from orchestrator.cli.output import print_data


@click.group()
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
    out = api(ctx).call(
        "POST",
        "/api/v1/users",
        json={"name": name, "is_admin": admin, "projects": list(projects), "token_days": days},
    )
    print_data(out, True)


@user.command("token")
@click.argument("name")
@click.option("--days", type=float, default=None, help="token lifetime in days")
@click.pass_context
def user_token(ctx: click.Context, name: str, days: float | None) -> None:
    """Issue another API token for a user (admin); shown once."""
    print_data(api(ctx).call("POST", f"/api/v1/users/{name}/tokens", json={"token_days": days}),
           True)


@user.command("tokens")
@click.argument("name")
@click.pass_context
def user_tokens(ctx: click.Context, name: str) -> None:
    """A user's API tokens: ids, expiry, whether revoked (never the secrets)."""
    print_data(api(ctx).call("GET", f"/api/v1/users/{name}/tokens"), ctx.obj["json"],
           ["id", "user", "created_at", "expires_at", "revoked"])


@user.command("revoke")
@click.argument("name")
@click.option("--token", "token_id", type=int, default=None,
              help="revoke only this token id (see `testbed user tokens NAME`)")
@click.pass_context
def user_revoke(ctx: click.Context, name: str, token_id: int | None) -> None:
    """Revoke a user's API tokens and pages sign-ins (or one token); at once."""
    client = api(ctx)
    if token_id is not None:
        out = client.call("DELETE", f"/api/v1/users/{name}/tokens/{token_id}")
        message = f"token {token_id} of {name} revoked"
    else:
        out = client.call("DELETE", f"/api/v1/users/{name}/tokens")
        message = (f"{name}: {out['tokens']} token(s) and {out['sessions']} pages "
                   "sign-in(s) revoked")
    if ctx.obj["json"]:
        print_data(out, True)
    else:
        click.echo(message)


@click.group()
def project() -> None:
    """Projects."""


@project.command("add")
@click.argument("name")
@click.pass_context
def project_add(ctx: click.Context, name: str) -> None:
    print_data(api(ctx).call("POST", "/api/v1/projects", json={"name": name}), True)

