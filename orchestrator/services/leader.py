"""Leadership of the background loops across replicas and workers (``model.lease``).

The reaper and the planner's periodic pass must run once across every orchestrator
process sharing a database. On PostgreSQL each process keeps trying one lease row
(``leases``), holding it with ``SELECT ... FOR UPDATE`` while it decides, so two
processes never both take it; on SQLite (one host, one process serving) the process
always leads, as before replicas existed.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from orchestrator.model.lease import Claim, Lease, claim, still_leading
from orchestrator.store.db import Database
from orchestrator.store.locks import shared_locks
from orchestrator.store.tables import Lease as LeaseRow

log = logging.getLogger(__name__)

#: The lease of the reaper and the planner's periodic pass.
LOOPS = "loops"


def process_name() -> str:
    """This process among replicas and workers: host, pid and a random part (a pid is
    reused after a restart; the old lease must not be mistaken for the new process's)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Leadership:
    """One process's view of a lease: ``renew()`` from one task, ``leading`` anywhere."""

    def __init__(self, db: Database, lease_s: float, *, name: str = LOOPS,
                 me: str | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.lease_s = lease_s
        self.name = name
        self.me = me or process_name()
        self.shared = shared_locks(db.engine)
        self._monotonic = monotonic
        self._renewed_at: float | None = None

    @property
    def leading(self) -> bool:
        if not self.shared:
            return True
        return still_leading(self._renewed_at, self._monotonic(), self.lease_s)

    def renew(self) -> bool:
        """One attempt to take or extend the lease; returns whether this process now
        leads. A database error counts as not renewed (the caller logs it)."""
        if not self.shared:
            return True
        sent_at = self._monotonic()
        was = self.leading
        try:
            won = self._claim()
        except IntegrityError:  # another process inserted the first row meanwhile
            won = False
        self._renewed_at = sent_at if won else None
        if won != was:
            log.info("%s lease %r (%s)", "took" if won else "lost", self.name, self.me)
        return won

    def _claim(self) -> bool:
        with self.db.session() as s:
            now = s.scalar(select(func.now()))
            assert now is not None
            until = now + timedelta(seconds=self.lease_s)
            row = s.get(LeaseRow, self.name, with_for_update=True)
            current = None if row is None else Lease(row.holder, row.expires_at)
            match claim(current, self.me, now):
                case Claim.WAIT:
                    return False
                case Claim.TAKE if row is None:
                    s.add(LeaseRow(name=self.name, holder=self.me, expires_at=until))
                case _:
                    assert row is not None
                    row.holder, row.expires_at = self.me, until
            return True

    def release(self) -> None:
        """Give the lease up at shutdown: another replica takes it at its next try
        rather than when it expires."""
        if not self.shared or self._renewed_at is None:
            return
        self._renewed_at = None
        with self.db.session() as s:
            s.execute(update(LeaseRow)
                      .where(LeaseRow.name == self.name, LeaseRow.holder == self.me)
                      .values(expires_at=func.now()))
