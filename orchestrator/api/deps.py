"""Request dependencies: the context, and who is calling."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from orchestrator.services.auth import Principal, authenticate_user
from orchestrator.services.context import Context


def get_ctx(request: Request) -> Context:
    ctx: Context = request.app.state.ctx
    return ctx


def bearer(authorization: Annotated[str | None, Header()] = None) -> str | None:
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return None


CtxDep = Annotated[Context, Depends(get_ctx)]
TokenDep = Annotated[str | None, Depends(bearer)]


def get_principal(ctx: CtxDep, token: TokenDep) -> Principal:
    return authenticate_user(ctx, token)


UserDep = Annotated[Principal, Depends(get_principal)]
