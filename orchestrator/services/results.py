"""A run's main result, read back from its archived bundle (the source of truth)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import Invalid, NotFound
from orchestrator.services.access import read_scope, readable_run
from orchestrator.services.auth import Principal
from orchestrator.services.context import Context
from orchestrator.store.tables import Bundle
from testbed_common.bundle import BundleContents, BundleError, read_member
from testbed_common.untrusted import load_json


def result_json(ctx: Context, path: Path, member: str) -> Any:
    """Member ``member`` of the bundle at ``path``, parsed through the bounded loader
    (size and depth capped); None when the bundle has no such member. Raises
    :class:`BundleError` when the member is over a cap or not JSON."""
    cap = ctx.settings.uploads.max_result_json_bytes
    data = read_member(path, member, max_bytes=cap)
    return None if data is None else load_json(data, what=member, max_bytes=cap)


@dataclass(frozen=True)
class ArchivedBundle:
    """Where a readable run's bundle lies in the archive."""

    run_id: str
    experiment: str
    path: Path
    sha256: str


def archived_bundle(ctx: Context, principal: Principal, run_id: str) -> ArchivedBundle:
    """The bundle of a run of the caller's projects; NotFound when the run is not
    theirs, or has no archived bundle yet."""
    with ctx.db.session() as s:
        run = readable_run(s, read_scope(s, principal), run_id)
        if run.bundle_sha256 is None:
            raise NotFound(f"run {run_id} has no archived bundle yet (state {run.state})")
        bundle = s.get(Bundle, run.bundle_sha256)
        assert bundle is not None
        return ArchivedBundle(run_id=run.id, experiment=run.experiment,
                              path=ctx.archive.absolute(bundle.path), sha256=bundle.sha256)


def read_result(ctx: Context, principal: Principal, run_id: str) -> dict[str, Any]:
    """The experiment's declared result file of ``run_id``, parsed."""
    archived = archived_bundle(ctx, principal, run_id)
    path, experiment = archived.path, archived.experiment
    manifest = ctx.catalogue.get(experiment)
    if manifest is None:
        raise NotFound(f"experiment {experiment!r} is no longer in the catalogue")
    member = f"results/{manifest.result.file}"
    try:
        data = result_json(ctx, path, member)
    except BundleError as e:
        raise Invalid(f"run {run_id}'s result cannot be shown: {e}") from e
    if data is None:
        raise NotFound(f"run {run_id}'s bundle has no {member} (the experiment failed?)")
    if not isinstance(data, dict):
        raise Invalid(f"run {run_id}'s {member} is not a JSON object")
    return data


#: Result keys that hold a run's measured TCP rate, bit/s: tat's ``mean_bps`` and the
#: TAT mean of an ABw-TAT-ABw session.
RATE_KEYS = ("mean_bps", "tat_mean_bps")


def link_rate(doc: dict[str, Any]) -> float | None:
    """The link rate a result measured, for the planner's volume forecasts, if any."""
    for key in RATE_KEYS:
        value = doc.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
    return None


#: The agent's own record of a run; a few hundred bytes, so a larger one is not read.
META_RUN = "meta/run.json"
META_RUN_MAX_BYTES = 1024**2


def members_to_keep(ctx: Context, experiment: str, *, metered: bool) -> dict[str, int]:
    """What :func:`rate_in_bundle` and :func:`measured_in_bundle` read, for the
    inspection pass to keep (name -> most bytes): the experiment's result file, and
    ``meta/run.json`` unless the run's metered bytes are known already."""
    cap = ctx.settings.uploads.max_result_json_bytes
    keep = {} if metered else {META_RUN: min(cap, META_RUN_MAX_BYTES)}
    manifest = ctx.catalogue.get(experiment)
    if manifest is not None:
        keep[f"results/{manifest.result.file}"] = cap
    return keep


def _kept_json(ctx: Context, contents: BundleContents, member: str) -> Any:
    """The kept member parsed through the bounded loader; None when it was not kept
    (absent or over its cap) or is not JSON."""
    data = contents.kept.get(member)
    if data is None:
        return None
    try:
        return load_json(data, what=member, max_bytes=ctx.settings.uploads.max_result_json_bytes)
    except BundleError:
        return None


def rate_in_bundle(ctx: Context, experiment: str, contents: BundleContents) -> float | None:
    """:func:`link_rate` of the result file of an inspected bundle, or None when the
    experiment declares no rate or the file is missing, over its cap or not JSON (the
    bundle is archived all the same; ingest notes why the result was not read)."""
    manifest = ctx.catalogue.get(experiment)
    if manifest is None:
        return None
    doc = _kept_json(ctx, contents, f"results/{manifest.result.file}")
    return link_rate(doc) if isinstance(doc, dict) else None


def started_in_bundle(ctx: Context, contents: BundleContents) -> str | None:
    """When the run's experiment started, as the agent wrote it in the bundle's
    meta/run.json (``started_at``, the node's clock), or None when absent."""
    doc = _kept_json(ctx, contents, META_RUN)
    started = doc.get("started_at") if isinstance(doc, dict) else None
    return started if isinstance(started, str) else None


def measured_in_bundle(ctx: Context, contents: BundleContents) -> int | None:
    """The bytes the run moved on its interface, as the agent wrote them in the bundle's
    meta/run.json (``bytes_used``, both directions), or None when the experiment never
    started (nothing metered) or the document is missing or malformed. The settlement
    falls back on it when the agent's state report with the figure never arrived."""
    doc = _kept_json(ctx, contents, META_RUN)
    if not isinstance(doc, dict) or doc.get("started_at") is None:
        return None
    used = doc.get("bytes_used")
    if isinstance(used, int) and not isinstance(used, bool) and used >= 0:
        return used
    return None
