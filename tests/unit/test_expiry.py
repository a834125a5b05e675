"""The one expiry rule (model.expiry): a grant is out at the instant it ends, and every
lease and sign-in decides with it, in Python and in SQL alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, insert, select
from sqlalchemy.orm import Session

from orchestrator.model import lease, worklease
from orchestrator.model.expiry import expired
from orchestrator.store.expiry import expired_sql
from orchestrator.store.tables import Base, Lease

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
TICK = timedelta(microseconds=1)


@pytest.mark.parametrize(("ends_at", "out"), [
    (NOW + TICK, False),  # a microsecond left: still live
    (NOW, True),          # at its end: out
    (NOW - TICK, True),
])
def test_a_grant_is_out_at_the_instant_it_ends(ends_at: datetime, out: bool) -> None:
    assert expired(ends_at, NOW) is out


def test_a_lease_of_d_seconds_lasts_exactly_d_seconds() -> None:
    ends = worklease.lease_end(NOW, 120)
    assert not expired(ends, NOW + timedelta(seconds=120) - TICK)
    assert expired(ends, NOW + timedelta(seconds=120))


@pytest.mark.parametrize("ends_at", [NOW - TICK, NOW, NOW + TICK])
def test_the_leader_lease_and_the_work_claims_agree_at_the_boundary(ends_at: datetime) -> None:
    taken_over = lease.claim(lease.Lease("b", ends_at), "a", NOW) is lease.Claim.TAKE
    assert taken_over is worklease.is_free(worklease.Claim("b", ends_at), NOW)
    assert taken_over is expired(ends_at, NOW)


def test_a_released_leader_lease_is_free_at_once() -> None:
    """``Leadership.release`` writes expires_at = now(): another replica takes it in
    the same instant."""
    assert lease.claim(lease.Lease("gone", NOW), "a", NOW) is lease.Claim.TAKE


def test_sql_decides_as_python_at_the_boundary() -> None:
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine, tables=[Lease.__table__])
    ends = {"before": NOW - TICK, "at": NOW, "after": NOW + TICK}
    with Session(engine) as s:
        s.execute(insert(Lease), [{"name": k, "holder": "h", "expires_at": v}
                                  for k, v in ends.items()])
        out = set(s.scalars(select(Lease.name).where(expired_sql(Lease.expires_at, NOW))))
        live = set(s.scalars(select(Lease.name).where(~expired_sql(Lease.expires_at, NOW))))
    assert out == {k for k, v in ends.items() if expired(v, NOW)} == {"before", "at"}
    assert live == {"after"}
