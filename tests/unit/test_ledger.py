"""Quota ledger: reservations, refusals users read, the settlement rule, usage summed
from the journal, rollover, and the invariant that granted reservations never pass the
usable cap (property test).

Settling is tested as production does it: the rule (``quotas.settlement.settle``)
decides, a journal of runs keeps the decisions, and usage is summed from the journal
(``usage_from_journal``) into the state the next reservation is checked against."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.ids import NodeId
from orchestrator.quotas.ledger import (
    JournalTotals,
    LedgerState,
    ProjectBudget,
    ProjectId,
    QuotaLedger,
    Refusal,
    RefusalCode,
    Reservation,
    SimKey,
    SimQuota,
    period_start,
    usage_from_journal,
)
from orchestrator.quotas.settlement import ChargeBasis, Settlement, settle

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


class Journal:
    """The runs table in miniature: each run's reservation and, once settled, what the
    rule decided; summed per run as the service sums its rows."""

    def __init__(self, base: LedgerState) -> None:
        self.base = base
        self.runs: list[tuple[Reservation, Settlement | None]] = []

    def ledger(self) -> QuotaLedger:
        sims, projects = usage_from_journal(
            JournalTotals(r.sim, r.period_start, r.project,
                          r.nbytes if s is None else 0,
                          s.charged_bytes if s else 0, s.overrun_bytes if s else 0)
            for r, s in self.runs)
        return QuotaLedger(replace(self.base, sim_usage=sims, project_usage=projects))

    def reserve(self, *, nbytes: int, at: datetime) -> Reservation | Refusal:
        got = self.ledger().reserve(sim=SIM, project=P, nbytes=nbytes, at=at)
        if isinstance(got, Reservation):
            self.runs.append((got, None))
        return got

    def settle(self, r: Reservation, *, measured: int | None,
               started: bool = True) -> Settlement:
        i = next(i for i, (held, s) in enumerate(self.runs) if held is r and s is None)
        done = settle(r, measured_bytes=measured, started=started)
        self.runs[i] = (r, done)
        return done


def journal(cap: int = 5 * GB, *, margin: float = 0.05, reset_day: int = 1) -> Journal:
    return Journal(ledger(cap, margin=margin, reset_day=reset_day).state())


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


R = Reservation(SIM, P, datetime(2026, 3, 1, tzinfo=UTC), GB)


@pytest.mark.parametrize(("measured", "started", "charged", "released", "overrun", "basis"), [
    (400_000_000, True, 400_000_000, 600_000_000, 0, ChargeBasis.MEASURED),
    (1_300_000_000, True, 1_300_000_000, 0, 300_000_000, ChargeBasis.MEASURED),
    (GB, True, GB, 0, 0, ChargeBasis.MEASURED),
    # a measurement wins over the state the run was in
    (5_000, False, 5_000, GB - 5_000, 0, ChargeBasis.MEASURED),
    (None, False, 0, GB, 0, ChargeBasis.NOT_STARTED),
    (None, True, GB, 0, 0, ChargeBasis.UNMEASURED),  # the safe side
])
def test_settlement_rule(measured: int | None, started: bool, charged: int, released: int,
                         overrun: int, basis: ChargeBasis) -> None:
    s = settle(R, measured_bytes=measured, started=started)
    assert (s.charged_bytes, s.released_bytes, s.overrun_bytes, s.basis) == (
        charged, released, overrun, basis)
    assert s.reservation is R


def test_an_overrun_is_explained_and_nothing_else_is() -> None:
    s = settle(R, measured_bytes=1_300_000_000, started=True)
    assert s.overrun_note() == ("quota overrun: 1.30 GB measured by the agent, 300.00 MB "
                                "over the 1.00 GB reserved on SIM 240-01 of se-03/op0")
    assert settle(R, measured_bytes=GB, started=True).overrun_note() is None


def test_a_negative_measurement_is_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        settle(R, measured_bytes=-1, started=True)


def test_settling_releases_the_rest_at_once_and_records_overrun() -> None:
    j = journal()
    r = j.reserve(nbytes=GB, at=T)
    assert isinstance(r, Reservation)
    j.settle(r, measured=400_000_000)
    st_ = j.ledger().sim_status(SIM, T)
    assert (st_.used, st_.reserved, st_.overrun) == (400_000_000, 0, 0)
    r2 = j.reserve(nbytes=GB, at=T)
    assert isinstance(r2, Reservation)
    assert j.ledger().sim_status(SIM, T).reserved == GB
    j.settle(r2, measured=1_300_000_000)
    led = j.ledger()
    assert led.sim_status(SIM, T).overrun == 300_000_000
    assert (led.project_status(P).used, led.project_status(P).overrun) == (1_700_000_000,
                                                                           300_000_000)


def test_a_cancelled_run_gives_its_whole_reservation_back() -> None:
    j = journal()
    r = j.reserve(nbytes=4 * GB, at=T)
    assert isinstance(r, Reservation)
    assert isinstance(j.reserve(nbytes=GB, at=T), Refusal)
    j.settle(r, measured=None, started=False)
    assert isinstance(j.reserve(nbytes=4 * GB, at=T), Reservation)


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


@given(at=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1),
                       timezones=st.just(UTC)),
       reset_day=st.integers(1, 31),
       zone=st.sampled_from(["UTC", "Europe/Stockholm", "America/New_York", "Asia/Kolkata",
                             "Pacific/Auckland"]))
def test_the_periods_start_at_a_local_midnight_and_follow_each_other(
        at: datetime, reset_day: int, zone: str) -> None:
    """``period_start`` (what the database's per-SIM sums match periods by) starts the
    period ``period_at`` gives; periods tile time: each begins where the one before
    ends, at a local midnight."""
    start = period_start(at, reset_day=reset_day, timezone=zone)
    period = SimQuota(SIM, GB, reset_day=reset_day, timezone=zone).period_at(at)
    assert period.start == start <= at < period.end
    assert period_start(period.end, reset_day=reset_day, timezone=zone) == period.end
    local = start.astimezone(ZoneInfo(zone))
    assert (local.hour, local.minute) == (0, 0)


def test_reset_day_31_means_the_last_day_of_short_months() -> None:
    q = SimQuota(SIM, GB, reset_day=31)
    p = q.period_at(datetime(2026, 3, 1, tzinfo=UTC))
    assert (p.start, p.end) == (datetime(2026, 2, 28, tzinfo=UTC),
                                datetime(2026, 3, 31, tzinfo=UTC))


def test_a_settlement_after_the_reset_charges_the_old_period() -> None:
    j = journal(reset_day=15)
    r = j.reserve(nbytes=GB, at=datetime(2026, 3, 14, 20, tzinfo=UTC))
    assert isinstance(r, Reservation)
    j.settle(r, measured=GB)
    led = j.ledger()
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
    j = journal(cap, margin=margin, reset_day=reset_day)
    quota = j.base.sims[SIM]
    open_: list[Reservation] = []
    for op, n, day in ops:
        at = T + timedelta(days=day)
        if op == "reserve":
            r = j.reserve(nbytes=n, at=at)
            if isinstance(r, Reservation):
                open_.append(r)
                s = j.ledger().sim_status(SIM, at)
                # even after measured overruns: a grant checks used + reserved
                assert s.used + s.reserved <= quota.usable_bytes
            else:
                assert r.code in (RefusalCode.SIM_CAP, RefusalCode.CAP_TOO_SMALL)
        elif open_:
            j.settle(open_.pop(n % len(open_)), measured=n)
    for (_, period), usage in j.ledger().state().sim_usage.items():
        assert usage.reserved == sum(r.nbytes for r in open_ if r.period_start == period)
