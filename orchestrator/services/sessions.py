"""Sign-ins of the pages, kept on the server.

Signing in with an API token (or the admin token) opens a session: the browser's
cookie holds a fresh random secret, not the token, and the store keeps the secret's
hash. Signing out revokes the session here, so the cookie is dead even where it was
copied. A session ends at the latest when its lifetime is over or when the credential
it was opened with is revoked, expires or (the admin token) is changed.
"""

from __future__ import annotations

import hmac
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from orchestrator.errors import Unauthorized
from orchestrator.model.expiry import expired
from orchestrator.model.ids import new_token
from orchestrator.services.auth import Principal, authenticate_user, hash_token
from orchestrator.services.context import Context
from orchestrator.store.expiry import expired_sql
from orchestrator.store.tables import ApiToken, PageSession

#: How long a sign-in lasts, seconds: a working day.
SESSION_S = 12 * 3600


def open_session(ctx: Context, token: str | None) -> tuple[str, Principal]:
    """A new session for the holder of ``token``: its secret (for the cookie) and who
    it is. Unauthorized when the token is not accepted."""
    principal = authenticate_user(ctx, token)
    assert token is not None  # authenticate_user refuses a missing token
    secret = new_token()
    now = ctx.clock.now()
    with ctx.db.session() as s:
        # Expired sessions are of no use to anyone: dropped as new ones open.
        s.execute(delete(PageSession).where(expired_sql(PageSession.expires_at, now)))
        s.add(PageSession(token_hash=hash_token(secret), user_id=principal.user_id,
                          credential_hash=hash_token(token), created_at=now,
                          expires_at=now + timedelta(seconds=SESSION_S)))
    return secret, principal


def _credential_alive(ctx: Context, s: Session, credential_hash: str, now: datetime) -> bool:
    if hmac.compare_digest(credential_hash, hash_token(ctx.settings.admin_token)):
        return True
    row = s.scalar(select(ApiToken).where(ApiToken.token_hash == credential_hash))
    return (row is not None and not row.revoked
            and (row.expires_at is None or not expired(row.expires_at, now)))


def authenticate_session(ctx: Context, secret: str | None) -> Principal:
    if not secret:
        raise Unauthorized("not signed in: sign in at /pages/login")
    now = ctx.clock.now()
    with ctx.db.session() as s:
        row = s.scalar(select(PageSession).where(PageSession.token_hash == hash_token(secret)))
        if row is None or row.revoked_at is not None or expired(row.expires_at, now):
            raise Unauthorized("signed out, or the sign-in expired: sign in again")
        if not _credential_alive(ctx, s, row.credential_hash, now):
            raise Unauthorized("the token this sign-in was opened with was revoked, "
                               "expired or changed: sign in with a valid one")
        return Principal(row.user.id, row.user.name, row.user.is_admin)


def close_session(ctx: Context, secret: str | None) -> bool:
    """Revokes the session; False when there was none open with that secret."""
    if not secret:
        return False
    with ctx.db.session() as s:
        row = s.scalar(select(PageSession).where(PageSession.token_hash == hash_token(secret)))
        if row is None or row.revoked_at is not None:
            return False
        row.revoked_at = ctx.clock.now()
        return True
