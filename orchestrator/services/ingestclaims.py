"""Claims on archived runs for ingest, so that every orchestrator worker and replica
ingests in parallel and no run is written twice.

A worker takes one pending run at a time with a lease (:mod:`orchestrator.model.worklease`
decides what is free and who holds what; the statements here apply the same rules to
the rows, each in one statement so that two workers cannot both win):

- **claim**: one ``UPDATE`` of the oldest free pending run, the run picked by a
  subquery. On PostgreSQL the subquery is ``SELECT ... FOR UPDATE SKIP LOCKED``, so
  workers claiming at the same moment take different runs instead of queueing on one;
  on SQLite the statement holds the database's write lock, which serialises claims.
- **renew**: the lease moves on only while the claim is still the worker's own. Ingest
  renews right before it writes, so a worker whose lease ran out and was taken over
  while it converted the bundle does not write.
- **finish**: ``ingested_at`` is set in the same statement that checks the claim, so a
  worker that lost its claim cannot mark the run done a second time.
- **release**: a worker that cannot write (the store is down) gives the run back at
  once rather than at the end of its lease.

A worker that dies holds its run until its lease ends (``TESTBED_INFLUX__INGEST_LEASE_S``);
then the next worker to claim takes it over.
"""

from __future__ import annotations

import os
import secrets
import socket
from datetime import datetime

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.orm import aliased

from orchestrator.model.worklease import lease_end, worker_id
from orchestrator.services.context import Context
from orchestrator.store.expiry import expired_sql
from orchestrator.store.tables import Run

_this_worker: str | None = None


def this_worker() -> str:
    """This process's worker id, made once (host, pid and a random part)."""
    global _this_worker
    if _this_worker is None:
        _this_worker = worker_id(socket.gethostname(), os.getpid(), secrets.token_hex(4))
    return _this_worker


def _pending(run: type[Run]) -> ColumnElement[bool]:
    return and_(run.bundle_sha256.is_not(None), run.ingested_at.is_(None))


def _free(run: type[Run], now: datetime) -> ColumnElement[bool]:
    """:func:`orchestrator.model.worklease.is_free` as SQL."""
    return or_(run.ingest_claim.is_(None), run.ingest_lease_until.is_(None),
               expired_sql(run.ingest_lease_until, now))


def claim_next(ctx: Context, owner: str, *, lease_s: float) -> str | None:
    """Claim the oldest archived run not yet written and not held by a live claim;
    returns its id, or None when there is none to take."""
    now = ctx.clock.now()
    candidate = aliased(Run)
    pick = (select(candidate.id)
            .where(_pending(candidate), _free(candidate, now))
            .order_by(candidate.not_before)
            .limit(1))
    with ctx.db.session() as s:
        if s.get_bind().dialect.name == "postgresql":
            pick = pick.with_for_update(skip_locked=True)
        claimed = s.execute(
            update(Run)
            .where(Run.id == pick.scalar_subquery(), _pending(Run), _free(Run, now))
            .values(ingest_claim=owner, ingest_lease_until=lease_end(now, lease_s))
            .returning(Run.id)
        ).scalar_one_or_none()
    return claimed


def _held(run_id: str, owner: str) -> ColumnElement[bool]:
    """:func:`orchestrator.model.worklease.holds` as SQL, for a run still pending."""
    return and_(Run.id == run_id, Run.ingest_claim == owner, Run.ingested_at.is_(None))


def renew(ctx: Context, run_id: str, owner: str, *, lease_s: float) -> bool:
    """Extend ``owner``'s lease on the run; False when it no longer holds it."""
    now = ctx.clock.now()
    with ctx.db.session() as s:
        result = s.execute(update(Run).where(_held(run_id, owner))
                           .values(ingest_lease_until=lease_end(now, lease_s)))
        return int(getattr(result, "rowcount", 0) or 0) == 1


def finish(ctx: Context, run_id: str, owner: str, *, note: str | None) -> bool:
    """Mark the run written, if ``owner`` still holds it; False (and nothing changed)
    when another worker took it over."""
    with ctx.db.session() as s:
        result = s.execute(
            update(Run).where(_held(run_id, owner))
            .values(ingested_at=ctx.clock.now(), ingest_note=note, ingest_claim=None,
                    ingest_lease_until=None))
        return int(getattr(result, "rowcount", 0) or 0) == 1


def release(ctx: Context, run_id: str, owner: str) -> None:
    """Give the run back unwritten, if ``owner`` still holds it."""
    with ctx.db.session() as s:
        s.execute(update(Run).where(_held(run_id, owner))
                  .values(ingest_claim=None, ingest_lease_until=None))
