"""What node agents call. Authenticated by node token; every call starts at the node."""

from __future__ import annotations

from fastapi import Request, Response
from starlette.concurrency import run_in_threadpool

from orchestrator.api.deps import CtxDep, RecordIdPath, TokenDep, UploadOffsetHeader
from orchestrator.api.errors import responses
from orchestrator.api.finite import api_router
from orchestrator.errors import Invalid
from orchestrator.services import nodes, runs, uploads
from testbed_common import wire

router = api_router(wire.AGENT_PREFIX, "agent")
#: Where bundle chunks are sent; its body cap is the chunk cap (see append_chunk).
CHUNK_PATH = f"{wire.AGENT_PREFIX}/runs/{{run_id}}/bundle"


@router.post("/register")
def register(ctx: CtxDep, token: TokenDep, body: wire.Registration) -> wire.RegistrationReply:
    return nodes.register(ctx, token, body)


@router.post("/heartbeat")
def heartbeat(ctx: CtxDep, token: TokenDep, body: wire.Heartbeat) -> wire.HeartbeatReply:
    return nodes.heartbeat(ctx, token, body)


@router.post("/runs/{run_id}/state", status_code=204, responses=responses(404, 409))
def report_state(ctx: CtxDep, token: TokenDep, run_id: RecordIdPath,
                 body: wire.StateReport) -> Response:
    runs.report_state(ctx, token, run_id, body)
    return Response(status_code=204)


@router.post("/runs/{run_id}/bundle", responses=responses(404, 409))
def create_upload(
    ctx: CtxDep, token: TokenDep, run_id: RecordIdPath, body: wire.UploadCreate
) -> wire.UploadStatus:
    return uploads.create_upload(ctx, token, run_id, body)


@router.get("/runs/{run_id}/bundle", responses=responses(404))
def upload_status(ctx: CtxDep, token: TokenDep, run_id: RecordIdPath) -> wire.UploadStatus:
    return uploads.upload_status(ctx, token, run_id)


@router.patch("/runs/{run_id}/bundle", responses=responses(404, 409, 507))
async def append_chunk(
    request: Request,
    ctx: CtxDep,
    token: TokenDep,
    run_id: RecordIdPath,
    upload_offset: UploadOffsetHeader,
) -> wire.UploadStatus:
    """The chunk's size is capped by ``settings.uploads.max_chunk_bytes`` before it is
    read (:mod:`orchestrator.api.guard`, which knows this route by CHUNK_PATH)."""
    chunks = [part async for part in request.stream()]
    if not any(chunks):
        raise Invalid("empty chunk: send the bundle bytes from the upload's offset")
    return await run_in_threadpool(
        uploads.append_chunk, ctx, token, run_id, upload_offset, b"".join(chunks)
    )
