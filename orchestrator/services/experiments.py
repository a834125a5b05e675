"""The experiment catalogue as users see it."""

from __future__ import annotations

from orchestrator.catalogue.manifest import Manifest
from orchestrator.errors import NotFound
from orchestrator.schemas import ExperimentPublic
from orchestrator.services.context import Context


def _public(m: Manifest) -> ExperimentPublic:
    return ExperimentPublic(
        name=m.name,
        version=m.version,
        description=m.description,
        image=m.image,
        parameters=m.schema,
        result=m.result.model_dump(),
        duration_s=m.duration.source,
        data_volume_bytes=m.data_volume.source,
        platforms=list(m.platforms),
        native_tools=m.native_tools,
    )


def list_experiments(ctx: Context) -> list[ExperimentPublic]:
    return [_public(m) for _, m in sorted(ctx.catalogue.items())]


def get_experiment(ctx: Context, name: str) -> ExperimentPublic:
    if name not in ctx.catalogue:
        raise NotFound(f"no experiment {name!r}; the catalogue has {sorted(ctx.catalogue)}")
    return _public(ctx.catalogue[name])
