"""``testbed dataset build`` and ``verify``: open-data releases (docs/open-data.md).

``build`` acts on the local installation, as ``timeseries rebuild`` does: it reads the
database and the raw archive named by the TESTBED_* settings and writes the release to
a local folder.
"""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

import click

from orchestrator.dataset.keys import BadKey
from orchestrator.dataset.release import BadRelease, check_licence, check_version, parse_exclusion


def _day(value: str | None, what: str) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as e:
        raise click.BadParameter(f"{value!r} is not a day: write YYYY-MM-DD (UTC)",
                                 param_hint=what) from e


@click.group()
def dataset() -> None:
    """Open-data releases of campaigns."""


@dataset.command("build")
@click.argument("campaigns", nargs=-1, required=True)
@click.option("--out", "out", required=True, type=click.Path(path_type=Path),
              help="the release's folder (new or empty)")
@click.option("--from", "from_", default=None, help="first day, UTC (YYYY-MM-DD)")
@click.option("--to", "to", default=None, help="last day, UTC, included (YYYY-MM-DD)")
@click.option("--daily", default=None,
              help="a daily release of this day (YYYY-MM-DD, UTC): --from and --to that "
                   "day, version the day")
@click.option("--version", "version", default=None, help="release version [1.0.0]")
@click.option("--previous", type=click.Path(path_type=Path, exists=True, file_okay=False),
              default=None, help="the previous release, for the changelog")
@click.option("--key-file", type=click.Path(path_type=Path), default=None,
              help="the release's anonymisation key (32 bytes or 64 hex digits); made "
                   "there if absent [OUT.key]. Keep it; never publish it")
@click.option("--licence", default="CC-BY-4.0", show_default=True)
@click.option("--author", "authors", multiple=True, help="an author to cite (repeat)")
@click.option("--pseudonymise-nodes", is_flag=True, help="publish node ids as pseudonyms")
@click.option("--grid", "grid_deg", type=float, default=0.01, show_default=True,
              help="position grid, degrees (0 keeps positions exact)")
@click.option("--raw", is_flag=True,
              help="add each run's results and records, addresses anonymised")
@click.option("--exclude", "excludes", multiple=True,
              help="leave out KIND:ID=REASON (run, node or sim; e.g. "
                   "'node:se-03=owner withdrew consent'); repeat")
@click.option("--link-profile", "profiles", multiple=True,
              help="NODE/IFACE=FILE: an emulated link's profile, copied in; repeat")
@click.pass_context
def build(ctx: click.Context, campaigns: tuple[str, ...], out: Path, from_: str | None,
          to: str | None, daily: str | None, version: str | None, previous: Path | None,
          key_file: Path | None, licence: str, authors: tuple[str, ...],
          pseudonymise_nodes: bool, grid_deg: float, raw: bool, excludes: tuple[str, ...],
          profiles: tuple[str, ...]) -> None:
    """Write a release of CAMPAIGNS' data to --out."""
    from orchestrator.bootstrap import build_context
    from orchestrator.errors import TestbedError
    from orchestrator.services.releases import missing_extra, read_key
    from orchestrator.settings import Settings

    try:  # the dataset extra's packages
        from orchestrator.services.datasets import (
            BuildRequest,
            LinkProfile,
            build_release,
            describe,
        )
    except ImportError as e:
        raise click.ClickException(str(missing_extra(e))) from e

    first, last = _day(from_, "--from"), _day(to, "--to")
    day = _day(daily, "--daily")
    if day is not None:
        if first or last:
            raise click.UsageError("--daily sets the period: give it without --from/--to")
        first = last = day
        version = version or day.isoformat()
    links = {}
    for item in profiles:
        sim, sep, file = item.partition("=")
        if not sep or "/" not in sim or not Path(file).is_file():
            raise click.BadParameter(f"{item!r}: write NODE/IFACE=FILE with an existing "
                                     "file", param_hint="--link-profile")
        links[sim] = LinkProfile.read(Path(file))
    try:
        key, made = read_key(key_file or out.with_name(out.name + ".key"))
        req = BuildRequest(
            campaigns=campaigns, out=out, key=key, version=check_version(version or "1.0.0"),
            period_from=first, period_to=None if last is None else last + timedelta(days=1),
            licence=check_licence(licence), authors=authors or BuildRequest.authors,
            pseudonymise=pseudonymise_nodes, grid_deg=grid_deg, raw=raw,
            exclusions=tuple(parse_exclusion(e) for e in excludes), link_profiles=links,
            previous=previous)
        context = build_context(Settings())
        try:
            built = build_release(context, req)
        finally:
            context.db.engine.dispose()  # a command, not a server: close the pool
    except (BadKey, BadRelease) as e:
        raise click.UsageError(str(e)) from e
    except TestbedError as e:
        raise click.ClickException(str(e)) from e
    if made:
        click.echo(f"made a new release key in {key_file or out.name + '.key'}: keep it "
                   "(the same key gives the same release) and never publish it", err=True)
    if ctx.obj and ctx.obj.get("json"):
        click.echo(json.dumps(describe(built), indent=2, sort_keys=True))
        return
    rows = ", ".join(f"{k} {v}" for k, v in sorted(built.counts.items()))
    click.echo(f"release {req.version} of {built.runs} run(s) in {out}: {rows}")
    for run, why in built.excluded:
        click.echo(f"left out run {run}: {why}")


@dataset.command("exclude")
@click.argument("rule")
def exclude(rule: str) -> None:
    """Leave KIND:ID=REASON out of every release from now on (run, node or sim), e.g.
    'node:se-03=owner withdrew consent'; the reason is printed in each release."""
    from orchestrator.bootstrap import build_context
    from orchestrator.errors import TestbedError
    from orchestrator.services.exclusions import record_exclusion
    from orchestrator.settings import Settings

    try:
        parsed = parse_exclusion(rule)
    except BadRelease as e:
        raise click.UsageError(str(e)) from e
    context = build_context(Settings())
    try:
        record_exclusion(context, parsed)
    except TestbedError as e:
        raise click.ClickException(str(e)) from e
    finally:
        context.db.engine.dispose()
    click.echo(f"{parsed.kind} {parsed.target} is left out of releases: {parsed.reason}")


@dataset.command("exclusions")
@click.option("--drop", default=None, metavar="KIND:ID",
              help="include this run, node or SIM in releases again")
def exclusions(drop: str | None) -> None:
    """What every release leaves out, and why."""
    from orchestrator.bootstrap import build_context
    from orchestrator.services.exclusions import drop_exclusion, recorded_exclusions
    from orchestrator.settings import Settings

    context = build_context(Settings())
    try:
        if drop is not None:
            kind, _, target = drop.partition(":")
            if not drop_exclusion(context, kind.strip().lower(), target.strip()):
                raise click.ClickException(f"{drop} is not excluded (see `testbed dataset "
                                           "exclusions`)")
            click.echo(f"{drop} is in releases again")
            return
        for rule in recorded_exclusions(context):
            click.echo(f"{rule.kind}:{rule.target}\t{rule.reason}")
    finally:
        context.db.engine.dispose()


@dataset.command("verify")
@click.argument("root", type=click.Path(path_type=Path))
def verify(root: Path) -> None:
    """Check a release: checksums, descriptor, tables' schema."""
    from orchestrator.services.releases import missing_extra

    try:  # the dataset extra's packages
        from orchestrator.services.dataset_files import verify_release
    except ImportError as e:
        raise click.ClickException(str(missing_extra(e))) from e
    verdict = verify_release(root)
    if not verdict.ok:
        for problem in verdict.problems:
            click.echo(problem, err=True)
        raise click.ClickException(f"{len(verdict.problems)} problem(s) in {root}")
    click.echo(f"{root}: {verdict.files} files, checksums, descriptor and schema all good")
