"""An orchestrator started beside its database waits for it to accept connections
(TESTBED_DATABASE_WAIT_S) instead of failing: compose starts the replicas with
PostgreSQL, not after its health check."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from sqlalchemy.exc import OperationalError

from orchestrator.store.db import DatabaseRefused, wait_for_database
from tests.integration import postgres
from tests.integration.live import free_port


def test_it_connects_once_the_database_is_there(postgres_url: str) -> None:
    """Refused at first (the database does not exist yet), then made after 0.6 s."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    later = threading.Timer(0.6, postgres.create_database, args=(postgres_url, name))
    later.start()
    began = time.monotonic()
    wait_for_database(postgres_url.format(db=name), 30, pause_s=0.05)
    later.join()
    assert time.monotonic() - began > 0.5


def test_it_gives_up_after_its_bound_with_the_error() -> None:
    url = f"postgresql+psycopg://u:p@127.0.0.1:{free_port()}/none"
    with pytest.raises(OperationalError):
        wait_for_database(url, 0.3, pause_s=0.05)


def test_refused_credentials_end_the_wait_at_once_with_what_to_do(postgres_url: str) -> None:
    """A role the server does not know is refused (SQLSTATE 28000), as a password it does
    not hold is (28P01): no amount of waiting mends either."""
    url = postgres_url.replace("postgres@", "nobody@", 1).format(db="postgres")
    began = time.monotonic()
    what = r'role "nobody" does not exist.*scripts/down --volumes'
    with pytest.raises(DatabaseRefused, match=what):
        wait_for_database(url, 30, pause_s=0.05)
    assert time.monotonic() - began < 10
