"""Dataset releases (docs/open-data.md): built and verified by background jobs, whose
state the release's record shows; a ready release's descriptor and files are served.
Why a job, and who may do what: :mod:`orchestrator.services.releases`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query
from fastapi.responses import FileResponse, Response

from orchestrator.api.deps import CtxDep, RecordIdPath, UserDep
from orchestrator.api.errors import responses
from orchestrator.api.finite import api_router
from orchestrator.dataset.metadata import MEDIATYPES
from orchestrator.dataset.release import Exclusion
from orchestrator.schemas import (
    ExclusionCreate,
    ExclusionPublic,
    ReleaseCreate,
    ReleaseFilePublic,
    ReleasePublic,
)
from orchestrator.services import exclusions, releases

router = api_router("/api/v1", "datasets")

#: A file's path in a release: ``tables/runs.csv``, ``raw/<run>/results/x.json``.
ReleaseFilePath = Annotated[str, Path(max_length=512, pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")]


@router.get("/datasets")
def list_releases(ctx: CtxDep, me: UserDep,
                  limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[ReleasePublic]:
    """The newest dataset releases of campaigns the caller may read, with their state."""
    return releases.list_releases(ctx, me, limit=limit)


@router.post("/datasets", status_code=202,
             responses=responses(403, 404, 409, 501, 507))
def build_release(ctx: CtxDep, me: UserDep, body: ReleaseCreate) -> ReleasePublic:
    """Build a release of campaigns (administrators): the options of ``testbed dataset
    build``. Answers 202 at once with the release in state ``building``; a background
    job builds and verifies it (a large campaign takes minutes), and ``GET
    /api/v1/datasets/{id}`` shows how far it got, then ``ready`` or ``failed`` with the
    reason. 404: no such campaign, or no finished run in the period; 409: another
    release job is running (the answer names it; wait for it); 507: the releases'
    disk is inside the free space kept for the archive (a release too large for the
    disk or over the largest allowed fails its job, with the reason)."""
    return releases.start_build(ctx, me, body)


@router.get("/datasets/{release_id}", responses=responses(404))
def get_release(ctx: CtxDep, me: UserDep, release_id: RecordIdPath) -> ReleasePublic:
    """A release: its state, its job's progress, and once ready its rows per table,
    files, size, runs left out and last verification."""
    return releases.get_release(ctx, me, release_id)


@router.delete("/datasets/{release_id}", status_code=204, responses=responses(403, 404, 409))
def delete_release(ctx: CtxDep, me: UserDep, release_id: RecordIdPath) -> Response:
    """Remove a release's files and record (administrators); not while a job runs on
    it. Its key is kept: the same request builds the same bytes again."""
    releases.delete_release(ctx, me, release_id)
    return Response(status_code=204)


@router.get("/datasets/{release_id}/datapackage.json", responses=responses(404, 409))
def get_descriptor(ctx: CtxDep, me: UserDep, release_id: RecordIdPath) -> dict[str, Any]:
    """The release's manifest: its Frictionless Data Package descriptor, with every
    file's size and SHA-256 and every table's columns, types and units. 409 until the
    release is ready."""
    return releases.descriptor(ctx, me, release_id)


@router.get("/datasets/{release_id}/files", responses=responses(404, 409))
def list_files(ctx: CtxDep, me: UserDep, release_id: RecordIdPath) -> list[ReleaseFilePublic]:
    """Every file of a ready release with its size and SHA-256 (SHA256SUMS's)."""
    return releases.list_files(ctx, me, release_id)


@router.get("/datasets/{release_id}/files/{path:path}", response_class=FileResponse,
            responses={200: {"content": {
                media: {"schema": {"type": "string", "format": "binary"}}
                for media in sorted({*MEDIATYPES.values(), "application/octet-stream"})},
                "description": "The file, byte for byte as in the release"},
                **responses(404, 409)})
def download_file(ctx: CtxDep, me: UserDep, release_id: RecordIdPath,
                  path: ReleaseFilePath) -> FileResponse:
    """One file of a ready release, by its path in SHA256SUMS (``Digest`` header: its
    SHA-256 as listed there)."""
    target, digest = releases.file_path(ctx, me, release_id, path)
    media = MEDIATYPES.get(target.suffix.lstrip("."), "application/octet-stream")
    return FileResponse(target, media_type=media, filename=target.name,
                        headers={"Digest": f"sha-256={digest}"})


@router.post("/datasets/{release_id}/verify", status_code=202,
             responses=responses(403, 404, 409, 501))
def verify_release(ctx: CtxDep, me: UserDep, release_id: RecordIdPath) -> ReleasePublic:
    """Verify a ready release again as it is on the disk now (checksums, descriptor,
    every row against its schema; administrators), as a job like a build: 202 at once,
    then the release's ``verified_at`` and ``problems`` (empty: all good)."""
    return releases.start_verify(ctx, me, release_id)


@router.get("/dataset-exclusions", responses=responses(403))
def list_exclusions(ctx: CtxDep, me: UserDep) -> list[ExclusionPublic]:
    """What every release leaves out, and why (administrators)."""
    return exclusions.list_exclusions(ctx, me)


@router.post("/dataset-exclusions", status_code=201, responses=responses(403, 404))
def add_exclusion(ctx: CtxDep, me: UserDep, body: ExclusionCreate) -> ExclusionPublic:
    """Leave a run, node or SIM out of every release built from now on, with the reason
    each such release prints (administrators); the CLI's ``testbed dataset exclude``.
    Again for the same one: its reason is replaced. 404: no such run or node; 422: a
    target not of its kind's form (a SIM is ``node/interface``)."""
    return exclusions.exclude(ctx, me, Exclusion(body.kind, body.target.strip(),
                                                 body.reason.strip()))


@router.delete("/dataset-exclusions/{exclusion_id}", status_code=204,
               responses=responses(403, 404))
def drop_exclusion(ctx: CtxDep, me: UserDep,
                   exclusion_id: Annotated[int, Path(ge=1, le=2**31 - 1)]) -> Response:
    """Include the run, node or SIM in releases built from now on (administrators);
    releases already built keep what they left out."""
    exclusions.include_again(ctx, me, exclusion_id)
    return Response(status_code=204)
