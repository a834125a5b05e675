"""What node agents call. Authenticated by node token; every call starts at the node."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from starlette.concurrency import run_in_threadpool

from orchestrator.api.deps import CtxDep, TokenDep
from orchestrator.errors import Invalid, TooLarge
from orchestrator.services import nodes, runs, uploads
from testbed_common import wire

router = APIRouter(prefix=wire.AGENT_PREFIX, tags=["agent"])


@router.post("/register")
def register(ctx: CtxDep, token: TokenDep, body: wire.Registration) -> wire.RegistrationReply:
    return nodes.register(ctx, token, body)


@router.post("/heartbeat")
def heartbeat(ctx: CtxDep, token: TokenDep, body: wire.Heartbeat) -> wire.HeartbeatReply:
    return nodes.heartbeat(ctx, token, body)


@router.post("/runs/{run_id}/state", status_code=204)
def report_state(ctx: CtxDep, token: TokenDep, run_id: str, body: wire.StateReport) -> Response:
    runs.report_state(ctx, token, run_id, body)
    return Response(status_code=204)


@router.post("/runs/{run_id}/bundle")
def create_upload(
    ctx: CtxDep, token: TokenDep, run_id: str, body: wire.UploadCreate
) -> wire.UploadStatus:
    return uploads.create_upload(ctx, token, run_id, body)


@router.get("/runs/{run_id}/bundle")
def upload_status(ctx: CtxDep, token: TokenDep, run_id: str) -> wire.UploadStatus:
    return uploads.upload_status(ctx, token, run_id)


@router.patch("/runs/{run_id}/bundle")
async def append_chunk(
    request: Request,
    ctx: CtxDep,
    token: TokenDep,
    run_id: str,
    upload_offset: Annotated[int, Header(alias=wire.UPLOAD_OFFSET_HEADER, ge=0)],
) -> wire.UploadStatus:
    limit = ctx.settings.uploads.max_chunk_bytes
    declared = request.headers.get("content-length")
    if declared is not None and int(declared) > limit:
        raise TooLarge(f"chunk of {declared} bytes is over {limit}; send smaller chunks")
    chunks: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise TooLarge(f"chunk is over {limit} bytes; send smaller chunks")
        chunks.append(part)
    if size == 0:
        raise Invalid("empty chunk: send the bundle bytes from the upload's offset")
    return await run_in_threadpool(
        uploads.append_chunk, ctx, token, run_id, upload_offset, b"".join(chunks)
    )
