"""Leases on shared work: who may take a run for ingest, and who still holds it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.model.worklease import OWNER_MAX, Claim, holds, is_free, lease_end, worker_id

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def test_unclaimed_work_is_free_and_a_live_lease_is_not() -> None:
    assert is_free(Claim(None, None), NOW)
    live = Claim("a", NOW + timedelta(seconds=1))
    assert not is_free(live, NOW)
    assert is_free(Claim("a", NOW), NOW)  # ends at now: out at that instant (model.expiry)


def test_a_dead_workers_claim_is_taken_over_only_after_its_lease() -> None:
    claim = Claim("dead", lease_end(NOW, 120))
    assert not is_free(claim, NOW + timedelta(seconds=119))
    assert is_free(claim, NOW + timedelta(seconds=121))


def test_only_the_owner_holds_even_past_its_lease_until_taken_over() -> None:
    ended = Claim("a", NOW - timedelta(seconds=5))
    assert holds(ended, "a") and not holds(ended, "b")
    assert not holds(Claim("b", NOW + timedelta(seconds=60)), "a")
    assert not holds(Claim(None, None), "a")


def test_a_lease_must_be_positive() -> None:
    assert lease_end(NOW, 0.5) == NOW + timedelta(milliseconds=500)
    with pytest.raises(ValueError, match="positive"):
        lease_end(NOW, 0)


def test_worker_ids_fit_the_column_and_keep_pid_and_nonce() -> None:
    assert worker_id("orch-1", 42, "beef") == "orch-1:42:beef"
    long = worker_id("h" * 200, 4194304, "0123abcd")
    assert len(long) == OWNER_MAX and long.endswith(":4194304:0123abcd")
