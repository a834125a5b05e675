"""Quota ledger: reservations, refusals users read, settling, rollover, and the
invariant that granted reservations never pass the usable cap (property test)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.ids import NodeId
from orchestrator.quotas.ledger import (
    LedgerState,
    ProjectBudget,
    ProjectId,
    QuotaLedger,
    Refusal,
    RefusalCode,
    Reservation,
    SimKey,
    SimQuota,
)

SIM = SimKey(NodeId("se-03"), "op0", "240-01")
P = ProjectId("mbb")
T = datetime(2026, 3, 10, 12, tzinfo=UTC)
GB = 10**9


def ledger(cap: int = 5 * GB, *, margin: float = 0.05, reset_day: int = 1,
           budget: int | None = None) -> QuotaLedger:
    state = LedgerState(sims={SIM: SimQuota(SIM, cap, reset_day=reset_day, margin=margin,
                                            timezone="Europe/Stockholm")},
                        projects={P: ProjectBudget(P, budget)} if budget else {})
    return QuotaLedger(state)


def test_reserve_then_refuse_with_the_message_users_see() -> None:
    led = ledger()
    r = led.reserve(sim=SIM, project=P, nbytes=4 * GB, at=T)
    assert isinstance(r, Reservation)
    refusal = led.reserve(sim=SIM, project=P, nbytes=850_000_000, at=T)
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.SIM_CAP
    assert refusal.message.startswith("SIM 240-01 on se-03/op0 would reach 97% of its "
                                      "monthly cap")
    status = led.sim_status(SIM, T)
    assert (status.used, status.reserved, status.remaining) == (0, 4 * GB, 750_000_000)


def test_settle_releases_the_rest_at_once_and_records_overrun() -> None:
    led = ledger()
    r = led.reserve(sim=SIM, project=P, nbytes=GB, at=T)
    assert isinstance(r, Reservation)
    s = led.settle(r, 400_000_000)
    assert (s.released_bytes, s.overrun_bytes) == (600_000_000, 0)
    st_ = led.sim_status(SIM, T)
    assert (st_.used, st_.reserved) == (400_000_000, 0)
    r2 = led.reserve(sim=SIM, project=P, nbytes=GB, at=T)
    assert isinstance(r2, Reservation)
    assert led.settle(r2, 1_300_000_000).overrun_bytes == 300_000_000
    assert led.sim_status(SIM, T).overrun == 300_000_000
    assert led.project_status(P).used == 1_700_000_000


def test_period_rolls_over_at_local_midnight_of_the_reset_day() -> None:
    led = ledger(reset_day=15)
    assert isinstance(led.reserve(sim=SIM, project=P, nbytes=4 * GB, at=T), Reservation)
    before = datetime(2026, 3, 14, 22, 59, tzinfo=UTC)  # 23:59 in Stockholm (CET)
    after = datetime(2026, 3, 14, 23, 0, tzinfo=UTC)  # 00:00 on the 15th
    assert isinstance(led.reserve(sim=SIM, project=P, nbytes=GB, at=before), Refusal)
    assert isinstance(led.reserve(sim=SIM, project=P, nbytes=GB, at=after), Reservation)
    period = led.sim_status(SIM, after).period
    assert period is not None
    assert period.end == datetime(2026, 4, 14, 22, 0, tzinfo=UTC)  # CEST by then


def test_reset_day_31_means_the_last_day_of_short_months() -> None:
    q = SimQuota(SIM, GB, reset_day=31)
    p = q.period_at(datetime(2026, 3, 1, tzinfo=UTC))
    assert (p.start, p.end) == (datetime(2026, 2, 28, tzinfo=UTC),
                                datetime(2026, 3, 31, tzinfo=UTC))


def test_a_settlement_after_the_reset_charges_the_old_period() -> None:
    led = ledger(reset_day=15)
    r = led.reserve(sim=SIM, project=P, nbytes=GB, at=datetime(2026, 3, 14, 20, tzinfo=UTC))
    assert isinstance(r, Reservation)
    led.settle(r, GB)
    assert led.sim_status(SIM, datetime(2026, 3, 20, tzinfo=UTC)).used == 0
    assert led.sim_status(SIM, datetime(2026, 3, 1, tzinfo=UTC)).used == GB


def test_cap_below_one_run_cannot_ever_run() -> None:
    refusal = ledger(cap=100_000_000).reserve(sim=SIM, project=P, nbytes=99_000_000, at=T)
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.CAP_TOO_SMALL
    assert "cannot ever run" in refusal.message


def test_unknown_sim_and_project_budget() -> None:
    other = SimKey(NodeId("se-03"), "op1", "240-02")
    refusal = ledger().reserve(sim=other, project=P, nbytes=1, at=T)
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.NO_QUOTA
    led = ledger(budget=2 * GB)
    assert isinstance(led.reserve(sim=SIM, project=P, nbytes=GB, at=T), Reservation)
    refusal = led.reserve(sim=SIM, project=P, nbytes=1_500_000_000, at=T)
    assert isinstance(refusal, Refusal) and refusal.code is RefusalCode.PROJECT_BUDGET
    assert "project mbb would reach 125% of its data budget" in refusal.message


def test_state_is_a_new_value_and_the_snapshot_is_untouched() -> None:
    led = ledger()
    before = led.state()
    led.reserve(sim=SIM, project=P, nbytes=GB, at=T)
    assert before.sim_usage == {}
    assert sum(u.reserved for u in led.state().sim_usage.values()) == GB


def test_negative_volume_is_a_bug() -> None:
    with pytest.raises(ValueError, match="negative"):
        ledger().reserve(sim=SIM, project=P, nbytes=-1, at=T)


OPS = st.lists(st.one_of(
    st.tuples(st.just("reserve"), st.integers(0, 2 * GB), st.integers(0, 60)),
    st.tuples(st.just("settle"), st.integers(0, 3 * GB), st.integers(0, 60)),
), max_size=40)


@settings(max_examples=200, deadline=None)
@given(OPS, st.integers(GB, 6 * GB), st.floats(0, 0.3), st.integers(1, 31))
def test_granted_reservations_never_pass_the_usable_cap(
    ops: list[tuple[str, int, int]], cap: int, margin: float, reset_day: int
) -> None:
    led = ledger(cap, margin=margin, reset_day=reset_day)
    quota = led.state().sims[SIM]
    open_: list[Reservation] = []
    for op, n, day in ops:
        at = T + timedelta(days=day)
        if op == "reserve":
            r = led.reserve(sim=SIM, project=P, nbytes=n, at=at)
            if isinstance(r, Reservation):
                open_.append(r)
                s = led.sim_status(SIM, at)
                # even after measured overruns: a grant checks used + reserved
                assert s.used + s.reserved <= quota.usable_bytes
            else:
                assert r.code in (RefusalCode.SIM_CAP, RefusalCode.CAP_TOO_SMALL)
        elif open_:
            r = open_.pop(n % len(open_))
            led.settle(r, n)
    for (_, period), usage in led.state().sim_usage.items():
        assert usage.reserved == sum(r.nbytes for r in open_ if r.period_start == period)
