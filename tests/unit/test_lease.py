"""Who leads the background loops (model.lease): the pure decisions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from orchestrator.model.lease import (
    Claim,
    Lease,
    claim,
    planning_due,
    renew_every_s,
    still_leading,
    takeover_bound_s,
)

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def test_a_free_lease_is_taken() -> None:
    assert claim(None, "a", NOW) is Claim.TAKE


def test_the_holder_renews_its_own_lease_even_when_expired() -> None:
    assert claim(Lease("a", NOW + timedelta(seconds=5)), "a", NOW) is Claim.RENEW
    assert claim(Lease("a", NOW - timedelta(seconds=5)), "a", NOW) is Claim.RENEW


def test_another_holders_lease_is_waited_for_until_it_expires() -> None:
    assert claim(Lease("b", NOW + timedelta(microseconds=1)), "a", NOW) is Claim.WAIT
    assert claim(Lease("b", NOW), "a", NOW) is Claim.TAKE
    assert claim(Lease("b", NOW - timedelta(seconds=1)), "a", NOW) is Claim.TAKE


def test_a_leader_stops_acting_a_third_of_a_lease_before_it_expires() -> None:
    lease = 6.0
    assert not still_leading(None, 100.0, lease)
    assert still_leading(100.0, 100.0, lease)
    assert still_leading(100.0, 103.9, lease)
    assert not still_leading(100.0, 104.0, lease)  # the lease itself runs to 106


def test_one_missed_renewal_keeps_the_leader_leading() -> None:
    lease = 6.0
    # renewed at 100; the renewal at 102 failed; the next at 104 comes too late ...
    assert still_leading(100.0, 100.0 + renew_every_s(lease) * 1.9, lease)
    # ... so two missed renewals in a row end the leadership.
    assert not still_leading(100.0, 100.0 + renew_every_s(lease) * 2, lease)


def test_takeover_is_bounded_by_four_thirds_of_the_lease() -> None:
    assert takeover_bound_s(6.0) == 8.0
    assert takeover_bound_s(15.0) == 20.0


def test_the_leader_plans_on_its_interval_and_when_the_fleet_moved() -> None:
    assert not planning_due(leading=True, elapsed_s=1, interval_s=5, moved=False,
                            wanted=False)
    assert planning_due(leading=True, elapsed_s=5, interval_s=5, moved=False, wanted=False)
    assert planning_due(leading=True, elapsed_s=1, interval_s=5, moved=True, wanted=False)


def test_a_follower_plans_only_when_a_pass_is_wanted_there() -> None:
    assert not planning_due(leading=False, elapsed_s=9, interval_s=5, moved=True,
                            wanted=False)
    assert planning_due(leading=False, elapsed_s=0, interval_s=5, moved=False, wanted=True)
