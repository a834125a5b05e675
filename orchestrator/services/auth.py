"""Who is calling: users by API token, nodes by node token. Only SHA-256 hashes of
tokens are stored, so a leaked database does not leak credentials."""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.errors import Forbidden, Unauthorized
from orchestrator.model.expiry import expired
from orchestrator.services.context import Context
from orchestrator.settings import Settings
from orchestrator.store.locks import creation_lock_name, lock_in_transaction
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


#: What a token can look like: printable ASCII, no space (``new_token`` makes URL-safe
#: base64; an administrator's token is hex or similar). Anything else is refused as
#: unknown before it is hashed or compared (``hmac.compare_digest`` raises TypeError on
#: non-ASCII text, which was a 500).
_TOKEN = re.compile(r"[\x21-\x7e]{1,512}")


def well_formed(token: str) -> bool:
    return _TOKEN.fullmatch(token) is not None


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip() or None
    return None


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def may_scrape(settings: Settings, token: str) -> bool:
    """Whether ``token`` may read ``/metrics`` in full: the scrape token or the admin's."""
    if not well_formed(token):
        return False
    allowed = [t for t in (settings.metrics_token, settings.admin_token) if t]
    return any(hmac.compare_digest(token.encode(), t.encode()) for t in allowed)


def ensure_admin_user(s: Session, now: datetime) -> None:
    """The bootstrap administrator owns what is made with the admin token. Every replica
    and worker runs this at start, at the same moment on a new database: one creates it."""
    lock_in_transaction(s, creation_lock_name("user", ADMIN_USER))
    if s.scalar(select(User).where(User.name == ADMIN_USER)) is None:
        s.add(User(name=ADMIN_USER, is_admin=True, created_at=now))


def authenticate_user(ctx: Context, token: str | None) -> Principal:
    if not token:
        raise Unauthorized("missing API token: send 'Authorization: Bearer <token>'")
    if not well_formed(token):
        raise Unauthorized("malformed API token: a token is printable ASCII without spaces")
    with ctx.db.session() as s:
        if hmac.compare_digest(token.encode(), ctx.settings.admin_token.encode()):
            admin = s.scalar(select(User).where(User.name == ADMIN_USER))
            if admin is None:
                raise Unauthorized("administrator not bootstrapped; restart the orchestrator")
            return Principal(admin.id, admin.name, True)
        row = s.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(token)))
        if row is None or row.revoked:
            raise Unauthorized("unknown or revoked API token; ask an administrator for one")
        if row.expires_at is not None and expired(row.expires_at, ctx.clock.now()):
            raise Unauthorized(
                f"API token expired at {row.expires_at.isoformat()}; ask for a new one "
                "(testbed user token NAME)"
            )
        return Principal(row.user.id, row.user.name, row.user.is_admin)


def node_token_hash(token: str | None) -> str:
    """The hash a node's token is stored by; a missing or malformed token is refused
    before any lookup."""
    if not token:
        raise Unauthorized("missing node token: send 'Authorization: Bearer <node token>'")
    if not well_formed(token):
        raise Unauthorized("malformed node token: a token is printable ASCII without spaces")
    return hash_token(token)


#: A token that matches no node.
UNKNOWN_NODE_TOKEN = (
    "unknown node token: provision the node first (testbed node add) and give its "
    "agent the token it printed"
)


def authenticate_node(s: Session, token: str | None) -> Node:
    node = s.scalar(select(Node).where(Node.token_hash == node_token_hash(token)))
    if node is None:
        raise Unauthorized(UNKNOWN_NODE_TOKEN)
    return node
