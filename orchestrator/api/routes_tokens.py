"""Credentials' lifecycle: users' API tokens issued, listed and revoked; a node's token
rotated. Secrets are shown once, in the reply that makes them."""

from __future__ import annotations

from orchestrator.api.deps import CtxDep, NodeIdPath, TokenIdPath, UserDep, UserNamePath
from orchestrator.api.errors import responses
from orchestrator.api.finite import api_router
from orchestrator.schemas import NodeCreated, TokenCreate, TokenPublic, TokensRevoked, UserToken
from orchestrator.services import tokens

router = api_router("/api/v1", "tokens")


@router.get("/users/{name}/tokens", responses=responses(404))
def list_tokens(ctx: CtxDep, me: UserDep, name: UserNamePath) -> list[TokenPublic]:
    """A user's API tokens (an administrator any user's, a user their own)."""
    return tokens.list_tokens(ctx, me, name)


@router.post("/users/{name}/tokens", status_code=201, responses=responses(403, 404))
def issue_token(ctx: CtxDep, me: UserDep, name: UserNamePath, body: TokenCreate) -> UserToken:
    """Another API token for a user (admin); the secret is in this reply only."""
    return tokens.issue_token(ctx, me, name, body)


@router.delete("/users/{name}/tokens", responses=responses(404))
def revoke_tokens(ctx: CtxDep, me: UserDep, name: UserNamePath) -> TokensRevoked:
    """Revoke every API token and pages sign-in of a user, at once."""
    return tokens.revoke_tokens(ctx, me, name)


@router.delete("/users/{name}/tokens/{token_id}", responses=responses(404))
def revoke_token(
    ctx: CtxDep, me: UserDep, name: UserNamePath, token_id: TokenIdPath
) -> TokenPublic:
    """Revoke one API token of a user (and the pages sign-ins opened with it)."""
    return tokens.revoke_token(ctx, me, name, token_id)


@router.post("/nodes/{node_id}/rotate-token", responses=responses(403, 404))
def rotate_node_token(ctx: CtxDep, me: UserDep, node_id: NodeIdPath) -> NodeCreated:
    """A new token for a node (admin); the old one stops working at once."""
    return tokens.rotate_node_token(ctx, me, node_id)
