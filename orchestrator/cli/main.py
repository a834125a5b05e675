"""``testbed``: one CLI for operators and researchers.

``serve``, ``db``, ``timeseries`` and ``dataset`` act on the local installation; every
other command talks to the API at ``--url`` / ``TESTBED_URL`` with ``--token`` /
``TESTBED_TOKEN``.
"""

from __future__ import annotations

import logging

import click

from orchestrator.cli.campaigns import campaign, results_cmd
from orchestrator.cli.datasets import dataset
from orchestrator.cli.nodes import node
from orchestrator.cli.quotas import quota
from orchestrator.cli.runs import experiment, run
from orchestrator.cli.users import project, user


@click.group()
@click.option("--url", envvar="TESTBED_URL", default="http://127.0.0.1:8080", show_default=True)
@click.option("--token", envvar="TESTBED_TOKEN", default=None, help="API token (TESTBED_TOKEN)")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.pass_context
def cli(ctx: click.Context, url: str, token: str | None, as_json: bool) -> None:
    """Testbed orchestrator for mobile-broadband measurement."""
    ctx.obj = {"url": url, "token": token, "json": as_json}


@cli.command()
@click.option("--workers", type=click.IntRange(min=1), default=1, envvar="TESTBED_WORKERS",
              show_default=True,
              help="uvicorn worker processes (TESTBED_WORKERS); more than one needs "
                   "PostgreSQL, since they share the database")
def serve(workers: int) -> None:
    """Run the orchestrator (settings from TESTBED_* variables)."""
    import uvicorn

    from orchestrator import logconfig
    from orchestrator.api.app import create_app
    from orchestrator.settings import Settings

    logconfig.configure()
    settings = Settings()
    if workers > 1 and settings.database_url.startswith("sqlite"):
        raise click.UsageError("several workers need PostgreSQL: set TESTBED_DATABASE_URL to "
                               "a postgresql+psycopg:// URL, or serve with one worker")
    logging.getLogger("orchestrator").info(
        "serving on %s:%d, %d worker(s)", settings.host, settings.port, workers)
    if workers == 1:
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                    log_level="info", access_log=False)
    else:  # each worker builds its own app: the factory, by import string
        uvicorn.run("orchestrator.api.app:from_environment", factory=True, workers=workers,
                    host=settings.host, port=settings.port, log_level="info",
                    access_log=False)


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


for _command in (node, user, project, experiment, run, results_cmd, campaign, quota,
                 dataset):
    cli.add_command(_command)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
