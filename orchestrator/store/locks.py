"""Locks every orchestrator replica honours: PostgreSQL advisory locks, named here.

A thread lock or a flock holds within one process or one host; replicas on several
hosts share only the database, so what must happen one at a time across them (applying
the migrations, a planning pass, one upload's request) takes an advisory lock keyed by
a name. On SQLite (one file on one host, one writer at a time) these are no-ops: the
callers keep their in-process or flock locks for it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

#: Applying the schema migrations (every replica runs them at start).
MIGRATIONS = "testbed:migrations"
#: A planning pass, or anything that books runs for a campaign.
PLANNING = "testbed:planning"


def creation_lock_name(kind: str, name: str) -> str:
    """Creating the ``kind`` row named ``name`` if it is missing (the administrator, a
    project): replicas and workers starting together each find it missing, and all but
    one would then fail on its unique name. Taken before looking."""
    return f"testbed:create:{kind}:{name}"


def upload_lock_name(run_id: str) -> str:
    """One run's upload: its requests are taken one at a time across replicas."""
    return f"testbed:upload:{run_id}"


def lock_key(name: str) -> int:
    """The advisory lock key for a name: the first 8 bytes of its SHA-256 as a signed
    64-bit integer (PostgreSQL's bigint), the same in every process and release."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def shared_locks(engine: Engine) -> bool:
    """Whether this database offers locks across processes and hosts (PostgreSQL)."""
    return engine.dialect.name == "postgresql"


def lock_in_transaction(s: Session, name: str) -> None:
    """Take ``name`` until the session's transaction ends (commit or rollback), waiting
    for whoever holds it. A no-op on SQLite."""
    if shared_locks(s.get_bind().engine):
        s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key(name)})


@contextmanager
def held(engine: Engine, name: str) -> Iterator[None]:
    """Hold ``name`` for the block, on a connection of its own (the block's own
    sessions commit as they like meanwhile). Should the unlock fail, the connection is
    closed rather than pooled, which releases the lock all the same. PostgreSQL only."""
    conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    try:
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": lock_key(name)})
        try:
            yield
        finally:
            try:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": lock_key(name)})
            except Exception:
                log.exception("cannot release lock %s: closing its connection", name)
                conn.invalidate()
    finally:
        conn.close()
