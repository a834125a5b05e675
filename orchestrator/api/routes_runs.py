"""Experiments, runs and campaigns."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, Query
from fastapi.responses import FileResponse

from orchestrator.api.deps import (
    CtxDep,
    ExperimentPath,
    NodeIdQuery,
    RecordIdPath,
    RecordIdQuery,
    UserDep,
)
from orchestrator.api.errors import responses
from orchestrator.api.finite import api_router
from orchestrator.errors import NotFound
from orchestrator.schemas import (
    CampaignPublic,
    CampaignSummary,
    ExperimentPublic,
    RunCancel,
    RunCreate,
    RunPublic,
)
from orchestrator.services import campaigns, experiments, results, runs
from orchestrator.store.tables import Bundle
from testbed_common.states import RunState

router = api_router("/api/v1", "runs")


@router.get("/experiments")
def list_experiments(ctx: CtxDep, _me: UserDep) -> list[ExperimentPublic]:
    return experiments.list_experiments(ctx)


@router.get("/experiments/{name}", responses=responses(404))
def get_experiment(ctx: CtxDep, _me: UserDep, name: ExperimentPath) -> ExperimentPublic:
    return experiments.get_experiment(ctx, name)


@router.post("/runs", status_code=201, responses=responses(404, 409))
def submit_run(ctx: CtxDep, me: UserDep, body: RunCreate) -> RunPublic:
    return runs.submit_run(ctx, me, body)


@router.get("/runs")
def list_runs(
    ctx: CtxDep,
    _me: UserDep,
    state: RunState | None = None,
    node: NodeIdQuery = None,
    campaign: RecordIdQuery = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
) -> list[RunPublic]:
    return runs.list_runs(ctx, state=state, node=node, campaign=campaign, limit=limit)


@router.get("/runs/{run_id}", responses=responses(404))
def get_run(ctx: CtxDep, _me: UserDep, run_id: RecordIdPath) -> RunPublic:
    return runs.get_run(ctx, run_id)


@router.post("/runs/{run_id}/cancel", responses=responses(404, 409))
def cancel_run(ctx: CtxDep, me: UserDep, run_id: RecordIdPath, body: RunCancel) -> RunPublic:
    return runs.cancel_run(ctx, me, run_id, body)


@router.get("/runs/{run_id}/bundle", response_class=FileResponse, responses={
    200: {"content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
          "description": "The run's bundle, byte for byte as archived"},
    **responses(404)})
def download_bundle(ctx: CtxDep, _me: UserDep, run_id: RecordIdPath) -> FileResponse:
    run = runs.get_run(ctx, run_id)
    if run.bundle_sha256 is None:
        raise NotFound(f"run {run_id} has no archived bundle (state {run.state.value})")
    with ctx.db.session() as s:
        bundle = s.get(Bundle, run.bundle_sha256)
        assert bundle is not None
        path = ctx.archive.absolute(bundle.path)
    return FileResponse(
        path,
        media_type="application/gzip",
        filename=f"{run_id}.tar.gz",
        headers={"Digest": f"sha-256={run.bundle_sha256}"},
    )


@router.get("/runs/{run_id}/result", responses=responses(404, 507))
def get_result(ctx: CtxDep, _me: UserDep, run_id: RecordIdPath) -> dict[str, Any]:
    """The run's main result file (the experiment's declared format), from the archive."""
    return results.read_result(ctx, run_id)


@router.post("/campaigns", status_code=201, responses=responses(404, 409))
def submit_campaign(
    ctx: CtxDep, me: UserDep, body: Annotated[dict[str, Any], Body()]
) -> CampaignPublic:
    """A campaign document, version 1 (``steps`` with nodes, ``repetitions``, as soon as
    possible) or version 2 (selection, recurrence, quotas); see the architecture docs.
    The reply shows the runs booked now and the planner's decisions."""
    return campaigns.submit_campaign(ctx, me, body)


@router.get("/campaigns")
def list_campaigns(
    ctx: CtxDep, _me: UserDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[CampaignSummary]:
    """The newest campaigns: runs by state and the planner's decisions (deferred,
    skipped, rejected, each with its reason)."""
    return campaigns.list_campaigns(ctx, limit=limit)


@router.get("/campaigns/{campaign_id}", responses=responses(404))
def get_campaign(ctx: CtxDep, _me: UserDep, campaign_id: RecordIdPath) -> CampaignPublic:
    return campaigns.get_campaign(ctx, campaign_id)
