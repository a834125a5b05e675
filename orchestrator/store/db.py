"""Engine and session factory. SQLite gets WAL and a busy timeout so the API, the
reaper and CLI can share one file; PostgreSQL keeps its pool's connections open."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, pool
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)

#: Database connections per process (each uvicorn worker, each replica has its own).
POOL_SIZE = 15


def make_engine(url: str) -> Engine:
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
    else:
        # As many connections as before at most (SQLAlchemy's default: 5 kept and 10
        # more opened when busy), but all 15 kept: each connection opened for a burst
        # and closed after it cost a PostgreSQL backend's start (with 32 heartbeats in
        # flight, 3.6 ms of PostgreSQL's CPU a heartbeat instead of 1.3 ms).
        kwargs.update(pool_size=POOL_SIZE, max_overflow=0)
    engine = create_engine(url, **kwargs)
    if url.startswith("sqlite"):

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

    return engine


#: The server's own words when it refuses a login (libpq gives no SQLSTATE for a
#: connection that failed; these are PostgreSQL's messages for class 28, in English, the
#: server image's default). "database ... does not exist" is not among them: a server
#: being initialised makes its database after it first answers.
_REFUSED = re.compile(r'password authentication failed for user "[^"]*"'
                      r'|role "[^"]*" does not exist|no pg_hba\.conf entry[^\n]*')


class DatabaseRefused(RuntimeError):
    """The database answered and refused this orchestrator's credentials: waiting for it
    cannot help."""


def wait_for_database(url: str, within_s: float, *, pause_s: float = 0.2) -> None:
    """Return once the database accepts a connection, trying for up to ``within_s``
    seconds (then its error). An orchestrator started beside its database (the compose
    stack, a pod beside its PostgreSQL) imports and loads its catalogue meanwhile, and
    connects as soon as the server listens, instead of being started only once a health
    check has found the server ready.

    A server that refuses the user or password (SQLSTATE class 28: ``_REFUSED``) raises
    :class:`DatabaseRefused` at once: the commonest cause is a data volume made with
    another password (a new checkout's secrets beside an old checkout's volume), which
    waiting never mends, and the wait used to end a minute later in the same error."""
    engine = create_engine(url, poolclass=pool.NullPool)
    deadline = time.monotonic() + within_s
    said = False
    try:
        while True:
            try:
                with engine.connect():
                    return
            except OperationalError as e:
                if refusal := _REFUSED.search(str(e.orig)):
                    raise DatabaseRefused(
                        f"the database refused this orchestrator's credentials "
                        f"({refusal.group(0)}): the user or password in "
                        "TESTBED_DATABASE_URL is not the database's. A PostgreSQL data volume "
                        "keeps the password it was made with; with compose, scripts/down "
                        "--volumes deletes it (and its data)") from e
                if time.monotonic() >= deadline:
                    raise
                if not said:
                    log.info("waiting for the database (%s)", str(e).splitlines()[0])
                    said = True
                time.sleep(pause_s)
    finally:
        engine.dispose()


class Database:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._factory = sessionmaker(engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A unit of work: committed when the block ends, rolled back on error."""
        with self._factory() as session, session.begin():
            yield session

    @contextmanager
    def reading(self) -> Iterator[Session]:
        """A session for reads only: rolled back when the block ends, never committed
        (a check made before taking a lock has nothing to commit)."""
        with self._factory() as session:
            try:
                yield session
            finally:
                session.rollback()
