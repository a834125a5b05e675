"""Request dependencies: the context, and who is calling."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from orchestrator.services.auth import Principal, authenticate_user
from orchestrator.services.context import Context
from testbed_common import bounds, wire


# The dependencies that do no I/O are ``async``: FastAPI runs a plain ``def`` dependency
# in the thread pool, a hop per dependency per request (two on every heartbeat).
async def get_ctx(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


#: The security scheme of every route that needs a token (the guard reads it).
TOKEN_SCHEME = "Token"
#: Documents the scheme in OpenAPI; never refuses by itself (the services name what is
#: wrong with a token, and the guard refuses a missing one before the body is read).
_scheme = HTTPBearer(auto_error=False, scheme_name=TOKEN_SCHEME,
                     description="An API token, or a node's token on the agent routes")
_metrics_scheme = HTTPBearer(auto_error=False, scheme_name="MetricsToken",
                             description="TESTBED_METRICS_TOKEN (or the admin token)")


async def bearer(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_scheme)],
) -> str | None:
    """The bearer token; routes that depend on this are token-checked before their body
    is read (:mod:`orchestrator.api.guard`)."""
    return (credentials.credentials.strip() or None) if credentials is not None else None


async def scrape_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_metrics_scheme)],
) -> str | None:
    """The optional token of ``/metrics``: not :func:`bearer`, whose routes need one."""
    return await bearer(credentials)


CtxDep = Annotated[Context, Depends(get_ctx)]
TokenDep = Annotated[str | None, Depends(bearer)]


def get_principal(ctx: CtxDep, token: TokenDep) -> Principal:
    return authenticate_user(ctx, token)


UserDep = Annotated[Principal, Depends(get_principal)]


# Path, query and header parameters, bounded as the request bodies are
# (testbed_common.bounds): a value the store cannot hold is a 422, never a 500.
NodeIdPath = Annotated[str, Path(pattern=bounds.NODE_ID_PATTERN, max_length=63)]
InterfacePath = Annotated[str, Path(pattern=bounds.INTERFACE_PATTERN, max_length=15)]
RecordIdPath = Annotated[str, Path(pattern=bounds.RECORD_ID_PATTERN, max_length=40)]
ProjectPath = Annotated[str, Path(pattern=bounds.NAME_PATTERN, max_length=64)]
UserNamePath = Annotated[str, Path(pattern=bounds.NAME_PATTERN, max_length=64)]
TokenIdPath = Annotated[int, Path(ge=1, le=bounds.INT64_MAX)]
ExperimentPath = Annotated[str, Path(pattern=bounds.EXPERIMENT_PATTERN, max_length=64)]
NodeIdQuery = Annotated[str | None, Query(pattern=bounds.NODE_ID_PATTERN, max_length=63)]
RecordIdQuery = Annotated[str | None, Query(pattern=bounds.RECORD_ID_PATTERN, max_length=40)]
UploadOffsetHeader = Annotated[
    int, Header(alias=wire.UPLOAD_OFFSET_HEADER, ge=0, le=bounds.INT64_MAX)
]
