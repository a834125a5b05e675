"""A run's main result, read back from its archived bundle (the source of truth)."""

from __future__ import annotations

import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import NotFound
from orchestrator.services.access import read_scope, readable_run
from orchestrator.services.auth import Principal
from orchestrator.services.context import Context
from orchestrator.store.tables import Bundle


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
    with tarfile.open(path, "r:gz") as tar:
        try:
            handle = tar.extractfile(member)
        except KeyError:
            handle = None
        if handle is None:
            raise NotFound(f"run {run_id}'s bundle has no {member} (the experiment failed?)")
        data: dict[str, Any] = json.loads(handle.read())
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


def rate_in_bundle(ctx: Context, experiment: str, data: bytes) -> float | None:
    """:func:`link_rate` of the result file in a bundle (bytes of the tar.gz), or None
    when the experiment declares no rate or the file is missing or unreadable."""
    manifest = ctx.catalogue.get(experiment)
    if manifest is None:
        return None
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            handle = tar.extractfile(f"results/{manifest.result.file}")
            doc = json.loads(handle.read()) if handle is not None else None
    except (KeyError, tarfile.TarError, OSError, ValueError):
        return None
    return link_rate(doc) if isinstance(doc, dict) else None
