"""The lifecycle of credentials: users' API tokens issued, listed and revoked, and a
node's token rotated. Secrets are shown once, when made; only their hashes are kept.

Revoking takes effect at once: every request looks its token up again
(services.auth), and a pages sign-in lives no longer than the token it was opened
with (services.sessions).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.errors import NotFound
from orchestrator.model.ids import new_token
from orchestrator.schemas import NodeCreated, TokenCreate, TokenPublic, TokensRevoked, UserToken
from orchestrator.services.access import may_manage_user
from orchestrator.services.auth import Principal, hash_token
from orchestrator.services.context import Context
from orchestrator.services.views import node_public
from orchestrator.store.expiry import expired_sql
from orchestrator.store.tables import ApiToken, Node, PageSession, User


def add_token(s: Session, user: User, *, days: float | None, now: datetime) -> UserToken:
    """A new API token for ``user``; the reply holds the secret, the store its hash."""
    token = new_token()
    expires = now + timedelta(days=days) if days else None
    row = ApiToken(user_id=user.id, token_hash=hash_token(token), created_at=now,
                   expires_at=expires)
    s.add(row)
    s.flush()
    return UserToken(user=user.name, token=token, expires_at=expires, token_id=row.id)


def _user(s: Session, principal: Principal, name: str) -> User:
    """The user whose tokens the caller may manage; another user's name is "not found"
    for a non-administrator, as if it did not exist (services.access)."""
    user = s.scalar(select(User).where(User.name == name))
    if user is None or not may_manage_user(principal, name):
        raise NotFound(f"no user {name!r}" + ("" if principal.is_admin else " you manage"))
    return user


def _public(row: ApiToken, user: User) -> TokenPublic:
    return TokenPublic(id=row.id, user=user.name, created_at=row.created_at,
                       expires_at=row.expires_at, revoked=row.revoked)


def list_tokens(ctx: Context, principal: Principal, name: str) -> list[TokenPublic]:
    with ctx.db.session() as s:
        user = _user(s, principal, name)
        rows = s.scalars(select(ApiToken).where(ApiToken.user_id == user.id)
                         .order_by(ApiToken.id)).all()
        return [_public(r, user) for r in rows]


def issue_token(ctx: Context, principal: Principal, name: str, body: TokenCreate) -> UserToken:
    """Another token for a user (admin): to replace a lost or revoked one."""
    principal.require_admin()
    with ctx.db.session() as s:
        return add_token(s, _user(s, principal, name), days=body.token_days,
                         now=ctx.clock.now())


def revoke_tokens(ctx: Context, principal: Principal, name: str) -> TokensRevoked:
    """Every API token of the user, and every pages sign-in of theirs, stop working."""
    now = ctx.clock.now()
    with ctx.db.session() as s:
        user = _user(s, principal, name)
        tokens = s.scalars(select(ApiToken).where(
            ApiToken.user_id == user.id, ApiToken.revoked.is_(False))).all()
        sessions = s.scalars(select(PageSession).where(
            PageSession.user_id == user.id, PageSession.revoked_at.is_(None),
            ~expired_sql(PageSession.expires_at, now))).all()
        for token in tokens:
            token.revoked = True
        for session in sessions:
            session.revoked_at = now
        return TokensRevoked(user=user.name, tokens=len(tokens), sessions=len(sessions))


def revoke_token(ctx: Context, principal: Principal, name: str, token_id: int) -> TokenPublic:
    """One API token of the user stops working (and the sign-ins opened with it)."""
    with ctx.db.session() as s:
        user = _user(s, principal, name)
        row = s.get(ApiToken, token_id)
        if row is None or row.user_id != user.id:
            raise NotFound(f"user {name!r} has no token {token_id}; list them with "
                           f"`testbed user tokens {name}`")
        row.revoked = True
        return _public(row, user)


def rotate_node_token(ctx: Context, principal: Principal, node_id: str) -> NodeCreated:
    """A new token for a node (admin). The old one stops working at once: give the new
    one to the node's agent (TESTBED_NODE_TOKEN) and restart it."""
    principal.require_admin()
    token = new_token()
    with ctx.db.session() as s:
        node = s.get(Node, node_id)
        if node is None:
            raise NotFound(f"no node {node_id!r}; list them with `testbed node list`")
        node.token_hash = hash_token(token)
        return NodeCreated(node=node_public(node, ctx.clock.now(), ctx.settings.health),
                           token=token)
