"""Who is calling: users by API token, nodes by node token. Only SHA-256 hashes of
tokens are stored, so a leaked database does not leak credentials."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.errors import Forbidden, Unauthorized
from orchestrator.services.context import Context
from orchestrator.store.tables import ApiToken, Node, User

ADMIN_USER = "admin"


@dataclass(frozen=True)
class Principal:
    user_id: int
    name: str
    is_admin: bool

    def require_admin(self) -> None:
        if not self.is_admin:
            raise Forbidden(f"user {self.name!r} is not an administrator")


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def ensure_admin_user(ctx: Context) -> None:
    """The bootstrap administrator owns what is made with the admin token."""
    with ctx.db.session() as s:
        if s.scalar(select(User).where(User.name == ADMIN_USER)) is None:
            s.add(User(name=ADMIN_USER, is_admin=True, created_at=ctx.clock.now()))


def authenticate_user(ctx: Context, token: str | None) -> Principal:
    if not token:
        raise Unauthorized("missing API token: send 'Authorization: Bearer <token>'")
    with ctx.db.session() as s:
        if hmac.compare_digest(token, ctx.settings.admin_token):
            admin = s.scalar(select(User).where(User.name == ADMIN_USER))
            if admin is None:
                raise Unauthorized("administrator not bootstrapped; restart the orchestrator")
            return Principal(admin.id, admin.name, True)
        row = s.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token)))
        if row is None or row.revoked:
            raise Unauthorized("unknown or revoked API token; ask an administrator for one")
        if row.expires_at is not None and row.expires_at <= ctx.clock.now():
            raise Unauthorized(
                f"API token expired at {row.expires_at.isoformat()}; ask for a new one "
                "(testbed user token NAME)"
            )
        return Principal(row.user.id, row.user.name, row.user.is_admin)


def authenticate_node(s: Session, token: str | None) -> Node:
    if not token:
        raise Unauthorized("missing node token: send 'Authorization: Bearer <node token>'")
    node = s.scalar(select(Node).where(Node.token_hash == hash_token(token)))
    if node is None:
        raise Unauthorized(
            "unknown node token: provision the node first (testbed node add) and give its "
            "agent the token it printed"
        )
    return node
