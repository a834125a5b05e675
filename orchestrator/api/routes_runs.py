"""Experiments, runs and campaigns."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, Query
from fastapi.responses import FileResponse, Response

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
from orchestrator.schemas import (
    CampaignPublic,
    CampaignSummary,
    ExperimentPublic,
    RunCancel,
    RunCreate,
    RunPublic,
)
from orchestrator.services import campaigns, experiments, results, runs
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
    me: UserDep,
    state: RunState | None = None,
    node: NodeIdQuery = None,
    campaign: RecordIdQuery = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
) -> list[RunPublic]:
    return runs.list_runs(ctx, me, state=state, node=node, campaign=campaign, limit=limit)


@router.get("/runs/{run_id}", responses=responses(404))
def get_run(ctx: CtxDep, me: UserDep, run_id: RecordIdPath) -> RunPublic:
    return runs.get_run(ctx, me, run_id)


@router.post("/runs/{run_id}/cancel", responses=responses(404, 409))
def cancel_run(ctx: CtxDep, me: UserDep, run_id: RecordIdPath, body: RunCancel) -> RunPublic:
    return runs.cancel_run(ctx, me, run_id, body)


@router.get("/runs/{run_id}/bundle", response_class=FileResponse, responses={
    200: {"content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}},
          "description": "The run's bundle, byte for byte as archived"},
    **responses(404)})
def download_bundle(ctx: CtxDep, me: UserDep, run_id: RecordIdPath) -> FileResponse:
    bundle = results.archived_bundle(ctx, me, run_id)
    return FileResponse(
        bundle.path,
        media_type="application/gzip",
        filename=f"{run_id}.tar.gz",
        headers={"Digest": f"sha-256={bundle.sha256}"},
    )


@router.get("/runs/{run_id}/result", responses=responses(404, 507))
def get_result(ctx: CtxDep, me: UserDep, run_id: RecordIdPath) -> dict[str, Any]:
    """The run's main result file (the experiment's declared format), from the archive."""
    return results.read_result(ctx, me, run_id)


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
    ctx: CtxDep, me: UserDep, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> list[CampaignSummary]:
    """The newest campaigns: runs by state and the planner's decisions (deferred,
    skipped, rejected, each with its reason)."""
    return campaigns.list_campaigns(ctx, me, limit=limit)


@router.get("/campaigns/{campaign_id}", responses=responses(404))
def get_campaign(ctx: CtxDep, me: UserDep, campaign_id: RecordIdPath) -> CampaignPublic:
    return campaigns.get_campaign(ctx, me, campaign_id)


@router.post("/campaigns/{campaign_id}/cancel", responses=responses(403, 404))
def cancel_campaign(ctx: CtxDep, me: UserDep, campaign_id: RecordIdPath) -> CampaignPublic:
    """Stop booking the campaign and cancel its runs that have not started (their quota
    reservations are released); started and finished runs and their data are kept.
    Its owner or an administrator; cancelling twice changes nothing."""
    return campaigns.cancel_campaign(ctx, me, campaign_id)


@router.delete("/campaigns/{campaign_id}", status_code=204,
               responses=responses(403, 404, 409))
def delete_campaign(ctx: CtxDep, me: UserDep, campaign_id: RecordIdPath) -> Response:
    """Cancel the campaign and hide it from lists and lookups. Only for a campaign
    without data: one with a run that started or has a bundle gets 409 (cancel it
    instead; archived data is never dropped). Its owner or an administrator."""
    campaigns.delete_campaign(ctx, me, campaign_id)
    return Response(status_code=204)
