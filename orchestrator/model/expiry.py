"""When something granted until a time has run out (pure): the one rule of every lease
and sign-in of the orchestrator.

The loops' leader lease (:mod:`orchestrator.model.lease`), the per-run ingest claims
(:mod:`orchestrator.model.worklease`), page sessions and API tokens all store the
instant their grant ends, and all decide with :func:`expired` (the statements that
decide in SQL with :func:`orchestrator.store.expiry.expired_sql`, the same comparison).
"""

from __future__ import annotations

from datetime import datetime


def expired(ends_at: datetime, now: datetime) -> bool:
    """Whether a grant that ends at ``ends_at`` has run out at ``now``.

    The boundary is inclusive: at ``ends_at`` itself it has run out. A grant taken at
    ``t`` for ``d`` seconds ends at ``t + d`` (``worklease.lease_end``, the leader's
    ``expires_at``) and so covers ``[t, t + d)``, exactly ``d`` seconds, not ``d`` and
    one more instant. A lease given up writes "ends now" (``Leadership.release`` sets
    ``expires_at`` to the database's ``now()``), which must free it at once, not one
    tick later. And a sign-in or API token whose ``expires_at`` is now was already
    refused at that instant, so every kind of grant agrees."""
    return ends_at <= now
