"""The campaign planner: bad input reported as decisions, priorities, balanced order,
multi-interface runs, re-planning, missed-slot policies, DST, time compression, and
property tests (no overlap with padding on any node; reservations within quota)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.model.ids import CampaignId, NodeId
from orchestrator.quotas.ledger import (
    LedgerState,
    ProjectBudget,
    ProjectId,
    QuotaLedger,
    Reservation,
    SimKey,
    SimQuota,
    Usage,
)
from orchestrator.scheduling.planner import (
    CalendarEntry,
    Campaign,
    DecisionKind,
    EntryStatus,
    Plan,
    ReasonCode,
    Snapshot,
    plan,
)
from orchestrator.scheduling.recurrence import TimeScale
from orchestrator.scheduling.selection import NodeFacts, SimFacts
from orchestrator.scheduling.spec import PROXY_MODES, CampaignSpecV2

NOW = datetime(2026, 3, 27, 12, tzinfo=UTC)
MB = 10**6
GB = 10**9


@dataclass(frozen=True)
class Model:
    """A manifest stand-in: runs ``d`` seconds plus 5, moves ``mb`` MB per interface."""

    interfaces: int = 1
    platforms: tuple[str, ...] = ("linux/amd64",)
    native_tools: bool = False

    def resolve_parameters(self, given: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(given) - {"d", "mb"}
        if unknown:
            raise ValueError(f"unknown parameter(s) {sorted(unknown)}")
        return {"d": 20, "mb": 10} | dict(given)

    def forecast(self, parameters: Mapping[str, Any], rate_bps: float) -> tuple[float, int]:
        return float(parameters["d"]) + 5, int(parameters["mb"] * MB)


CATALOGUE = {"abw": Model(), "tat": Model(), "mptcp": Model(interfaces=2)}


def node(name: str, tz: str = "Europe/Stockholm", country: str = "SE",
         n_sims: int = 2, **kw: Any) -> NodeFacts:
    ops = [("240-01", "Telia"), ("240-02", "Tre"), ("240-07", "Tele2")]
    return NodeFacts(NodeId(name), country, timezone=tz, sims=tuple(
        SimFacts(f"op{k}", *ops[k]) for k in range(n_sims)), **kw)


def quotas(nodes: list[NodeFacts], cap: int = 10 * GB, **kw: Any) -> LedgerState:
    sims = {}
    for n in nodes:
        for s in n.sims:
            key = SimKey(n.id, s.interface, s.mcc_mnc)
            sims[key] = SimQuota(key, cap, timezone=n.timezone)
    return LedgerState(sims=sims, **kw)


def snap(nodes: list[NodeFacts], **kw: Any) -> Snapshot:
    kw.setdefault("quotas", quotas(nodes))
    return Snapshot(now=kw.pop("now", NOW), nodes=nodes, catalogue=CATALOGUE, **kw)


def campaign(cid: str = "c1", *, submitted: datetime = NOW,
             proxy_modes: Mapping[str, str] | None = None, **spec: Any) -> Campaign:
    """A campaign of ``spec``; ``proxy_modes`` the catalogue's, as a submission's."""
    spec.setdefault("name", cid)
    spec.setdefault("steps", [{"experiment": "tat"}])
    context = None if proxy_modes is None else {PROXY_MODES: proxy_modes}
    return Campaign(CampaignId(cid), CampaignSpecV2.model_validate(spec, context=context),
                    submitted)


def hourly(hours: int = 3, start: datetime = NOW) -> dict[str, Any]:
    return {"kind": "every", "hours": 1, "start": start.isoformat(),
            "end": (start + timedelta(hours=hours)).isoformat()}


def codes(p: Plan) -> list[tuple[DecisionKind, ReasonCode]]:
    return [(d.kind, d.code) for d in p.decisions]


def run(s: Snapshot, *cs: Campaign, days: float = 2) -> Plan:
    return plan(s, list(cs), horizon=timedelta(days=days))


# ---- bad input, each reported as a decision ------------------------------------------

def test_an_expression_selecting_nothing_is_rejected_with_a_reason() -> None:
    p = run(snap([node("se-01")]), campaign(select="country:NO AND operator:242-01"))
    assert p.session_count == 0
    (d,) = p.decisions
    assert (d.kind, d.code) == (DecisionKind.REJECTED, ReasonCode.NOTHING_SELECTED)
    assert "selects no SIM" in d.message and "country:NO" in d.message


def test_overlapping_campaigns_the_lower_priority_is_deferred_naming_the_winner() -> None:
    nodes = [node("se-01", n_sims=1)]
    window = {"kind": "daily", "window": "03:00-03:01", "first_day": "2026-03-28",
              "last_day": "2026-03-28"}
    low = campaign("c-low", priority=0, recurrence=window, submitted=NOW - timedelta(days=1),
                   steps=[{"experiment": "tat", "parameters": {"d": 30}}])
    high = campaign("c-high", priority=5, recurrence=window,
                    steps=[{"experiment": "tat", "parameters": {"d": 30}}])
    p = run(snap(nodes), low, high)
    assert [b.session.campaign for b in p.bookings()] == ["c-high"]
    (d,) = p.decisions
    assert (d.kind, d.code, d.campaign) == (DecisionKind.DEFERRED, ReasonCode.NODE_BUSY, "c-low")
    assert "busy with campaign c-high" in d.message and "priority 5" in d.message


def test_equal_priority_goes_to_the_earlier_submission() -> None:
    nodes = [node("se-01", n_sims=1)]
    window = {"kind": "daily", "window": "03:00-03:01", "first_day": "2026-03-28",
              "last_day": "2026-03-28"}
    late = campaign("c-late", recurrence=window, steps=[{"experiment": "tat",
                                                          "parameters": {"d": 30}}])
    early = campaign("c-early", recurrence=window, submitted=NOW - timedelta(hours=1),
                     steps=[{"experiment": "tat", "parameters": {"d": 30}}])
    p = run(snap(nodes), late, early)
    assert [b.session.campaign for b in p.bookings()] == ["c-early"]


def test_a_window_that_never_occurs_is_rejected() -> None:
    never = {"kind": "daily", "window": "02:00-03:00", "first_day": "2026-03-29",
             "last_day": "2026-03-29"}
    p = run(snap([node("se-01")]), campaign(recurrence=never))
    assert codes(p) == [(DecisionKind.REJECTED, ReasonCode.NEVER_OCCURS)]
    assert "never occurs in Europe/Stockholm" in p.decisions[0].message


def test_a_cap_below_one_run_is_reported_as_cannot_ever_run_and_not_booked() -> None:
    nodes = [node("se-01", n_sims=1)]
    p = run(snap(nodes, quotas=quotas(nodes, cap=50 * MB)),
            campaign(steps=[{"experiment": "tat", "parameters": {"mb": 60}}]))
    assert p.session_count == 0
    assert codes(p) == [(DecisionKind.REJECTED, ReasonCode.CAP_TOO_SMALL)]
    assert "cannot ever run" in p.decisions[0].message


def test_unknown_experiment_and_bad_parameters() -> None:
    p = run(snap([node("se-01")]), campaign(steps=[{"experiment": "nope"}]),
            campaign("c2", steps=[{"experiment": "tat", "parameters": {"x": 1}}]))
    assert codes(p) == [(DecisionKind.REJECTED, ReasonCode.BAD_SPEC)] * 2
    assert "unknown experiment 'nope'" in p.decisions[0].message


def test_session_longer_than_the_window_cannot_ever_run() -> None:
    window = {"kind": "daily", "window": "03:00-03:01", "first_day": "2026-03-28",
              "last_day": "2026-03-30"}
    p = run(snap([node("se-01", n_sims=1)]),
            campaign(recurrence=window, steps=[{"experiment": "tat", "parameters": {"d": 90}}]))
    assert codes(p) == [(DecisionKind.REJECTED, ReasonCode.LONGER_THAN_WINDOW)]


# ---- rules --------------------------------------------------------------------------

def test_balanced_order_and_pause_within_a_session() -> None:
    steps = [{"experiment": "abw", "parameters": {"d": 5}}, {"experiment": "tat"},
             {"experiment": "abw", "parameters": {"d": 7}}]
    p = run(snap([node("se-01", n_sims=1)], padding_s=5),
            campaign(steps=steps, repetitions=2, pause_s=300))
    got = [(b.step, b.repetition, b.start - NOW) for b in p.bookings()]
    assert [(s, r) for s, r, _ in got] == [(0, 0), (1, 0), (2, 0), (2, 1), (1, 1), (0, 1)]
    # 10 s, 5 pad, 25 s, 5 pad, 12 s, then the 300 s pause
    assert [t.total_seconds() for _, _, t in got] == [0, 15, 45, 357, 374, 404]


def test_sims_of_a_node_are_measured_one_after_another() -> None:
    p = run(snap([node("se-01", n_sims=3)], padding_s=5), campaign(recurrence=hourly(1)))
    got = [(b.interfaces, (b.start - NOW).total_seconds()) for b in p.bookings()]
    assert sorted(got, key=lambda x: x[1]) == [(("op0",), 0), (("op1",), 30), (("op2",), 60)]


def test_multi_interface_experiments_book_and_reserve_every_interface() -> None:
    p = run(snap([node("se-01", n_sims=3)]), campaign(steps=[{"experiment": "mptcp"}]))
    (b,) = list(p.bookings())
    assert b.interfaces == ("op0", "op1")
    assert [r.sim.interface for r in b.reservations] == ["op0", "op1"]
    p = run(snap([node("se-01", n_sims=1)]), campaign(steps=[{"experiment": "mptcp"}]))
    assert codes(p) == [(DecisionKind.REJECTED, ReasonCode.TOO_FEW_INTERFACES)]


def test_sim_cap_defers_with_the_share_it_would_reach() -> None:
    nodes = [node("se-03", n_sims=1)]
    p = run(snap(nodes, quotas=quotas(nodes, cap=100 * MB)),
            campaign(recurrence=hourly(24), steps=[{"experiment": "tat",
                                                    "parameters": {"mb": 30}}]))
    assert p.session_count == 3  # 90 MB of the 95 MB usable
    (d,) = p.decisions
    assert (d.kind, d.code, d.count) == (DecisionKind.DEFERRED, ReasonCode.SIM_CAP, 21)
    assert d.message.startswith("deferred: SIM 240-01 on se-03/op0 would reach 120% of its "
                                "monthly cap")


def test_project_budget_defers_across_nodes() -> None:
    nodes = [node("se-01", n_sims=1), node("se-02", n_sims=1)]
    budget = {ProjectId("default"): ProjectBudget(ProjectId("default"), 55 * MB)}
    p = run(snap(nodes, quotas=quotas(nodes, projects=budget)), campaign(recurrence=hourly(4)))
    assert p.session_count == 5
    assert {d.code for d in p.decisions} == {ReasonCode.PROJECT_BUDGET}
    assert p.quotas.project_usage[ProjectId("default")].reserved == 50 * MB


def test_unavailable_nodes_are_deferred_and_replanning_brings_them_back() -> None:
    nodes = [node("se-01", n_sims=1), node("se-02", n_sims=1)]
    c = campaign(recurrence=hourly(2))
    p = run(snap(nodes, unavailable={NodeId("se-02"): "offline since 11:00"}), c)
    assert {b.node for b in p.bookings()} == {"se-01"}
    assert codes(p) == [(DecisionKind.DEFERRED, ReasonCode.NODE_UNAVAILABLE)]
    assert "offline since 11:00" in p.decisions[0].message
    assert {b.node for b in run(snap(nodes), c).bookings()} == {"se-01", "se-02"}


def test_replanning_does_not_book_held_or_done_sessions_again_but_retries_failed() -> None:
    nodes = [node("se-01", n_sims=1)]
    c = campaign(recurrence=hourly(3))
    first = list(run(snap(nodes), c).bookings())
    assert len(first) == 3
    status = [EntryStatus.DONE, EntryStatus.HELD, EntryStatus.FAILED]
    cal = [CalendarEntry(b.node, b.start, b.end, "run r-x", st_, b.session)
           for b, st_ in zip(first, status, strict=True)]
    again = list(run(snap(nodes, calendar=cal, now=NOW + timedelta(minutes=1)), c).bookings())
    assert [b.session.occurrence for b in again] == [first[2].session.occurrence]


def test_missed_windows_skip_or_catch_up_per_policy() -> None:
    nodes = [node("se-01", n_sims=1)]
    later = NOW + timedelta(hours=2, minutes=30)
    skip = run(snap(nodes, now=later), campaign(recurrence=hourly(4)))
    assert skip.session_count == 2  # the windows at 14:00 (open) and 15:00
    (d,) = skip.decisions
    assert (d.kind, d.code, d.count) == (DecisionKind.SKIPPED, ReasonCode.MISSED, 2)
    catch = run(snap(nodes, now=later), campaign(recurrence=hourly(4), missed="catch_up"))
    assert catch.session_count == 4 and not catch.decisions
    assert min(b.start for b in catch.bookings()) == later


def test_daily_window_in_node_local_time_across_spring_forward() -> None:
    nodes = [node("se-01", n_sims=1), node("us-01", tz="America/New_York", n_sims=1)]
    window = {"kind": "daily", "window": "02:00-03:00", "first_day": "2026-03-28",
              "last_day": "2026-03-30"}
    p = run(snap(nodes), campaign(recurrence=window), days=4)
    local = sorted((b.node, b.start.astimezone(ZoneInfo(tz)).strftime("%m-%d %H:%M"))
                   for b in p.bookings()
                   for tz in [("Europe/Stockholm" if b.node == "se-01"
                               else "America/New_York")])
    assert local == [("se-01", "03-28 02:00"), ("se-01", "03-30 02:00"),
                     ("us-01", "03-28 02:00"), ("us-01", "03-29 02:00"),
                     ("us-01", "03-30 02:00")]
    assert codes(p) == [(DecisionKind.SKIPPED, ReasonCode.DST_GAP)]


def test_time_compression_uses_the_same_path() -> None:
    c = campaign(recurrence=hourly(24), time_scale=60, time_anchor=NOW.isoformat(),
                 steps=[{"experiment": "tat", "parameters": {"d": 10}}])
    starts = [b.start for b in run(snap([node("se-01", n_sims=1)]), c).bookings()]
    assert len(starts) == 24 and starts[-1] - starts[0] == timedelta(minutes=23)


@given(st.integers(1, 3599), st.sampled_from([60, 180]))
@settings(max_examples=25, deadline=None)
def test_compressed_sessions_start_inside_their_hour(anchor_s: int, scale: int) -> None:
    """A compressed hour's window opens at a fraction of a wall second (the hour's
    distance from the anchor, divided by the scale); the session is booked on whole
    seconds, at or after it: a second early is minutes of campaign time, and its
    results would be written in the hour before."""
    anchor = NOW - timedelta(seconds=anchor_s)
    c = campaign(recurrence=hourly(24, NOW + timedelta(hours=1)), time_scale=scale,
                 time_anchor=anchor.isoformat(),
                 steps=[{"experiment": "tat", "parameters": {"d": 1}}])
    clock = TimeScale(scale, anchor)
    starts = sorted(b.start for b in run(snap([node("se-01", n_sims=1)], now=anchor), c).bookings())
    assert len(starts) == 24
    for i, at in enumerate(starts):
        opens = clock.to_wall(NOW + timedelta(hours=1 + i))  # float: to within 1 ms
        assert opens - timedelta(milliseconds=1) <= at < opens + timedelta(seconds=1), (
            i, opens, at)


def test_idle_campaigns_come_last_whatever_their_priority() -> None:
    nodes = [node("se-01", n_sims=1)]
    idle = campaign("c-idle", priority=100, recurrence={"kind": "idle"})
    busy = campaign("c-asap", submitted=NOW + timedelta(seconds=1))
    p = run(snap(nodes), idle, busy)
    order = [b.session.campaign for b in sorted(p.bookings(), key=lambda b: b.start)]
    assert order == ["c-asap", "c-idle"]


# ---- properties -----------------------------------------------------------------------

ZONES = ["Europe/Stockholm", "America/New_York", "Australia/Lord_Howe", "UTC"]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Snapshot, list[Campaign], int]:
    nodes = [node(f"n{i}", tz=draw(st.sampled_from(ZONES)), n_sims=draw(st.integers(1, 3)))
             for i in range(draw(st.integers(1, 3)))]
    caps = {(n.id, s.interface): draw(st.integers(20, 400)) * MB for n in nodes for s in n.sims}
    sims = {}
    usage = {}
    for n in nodes:
        for s in n.sims:
            key = SimKey(n.id, s.interface, s.mcc_mnc)
            q = SimQuota(key, caps[(n.id, s.interface)], reset_day=draw(st.integers(1, 31)),
                         margin=draw(st.sampled_from([0, 0.05, 0.2])), timezone=n.timezone)
            sims[key] = q
            used = draw(st.integers(0, q.usable_bytes))
            usage[(key, q.period_at(NOW).start)] = Usage(used=used)
    pad = draw(st.integers(0, 30))
    calendar = [CalendarEntry(n.id, NOW + timedelta(minutes=m), NOW + timedelta(minutes=m + d),
                              f"run r-{i}")
                for i, n in enumerate(nodes)
                for m, d in draw(st.lists(st.tuples(st.integers(-30, 2000), st.integers(1, 90)),
                                          max_size=4))]
    campaigns = []
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["asap", "every", "daily", "idle"]))
        rec: dict[str, Any] = {"kind": kind}
        if kind == "every":
            rec = hourly(draw(st.integers(1, 30)), NOW - timedelta(hours=draw(st.integers(0, 3))))
            rec["hours"] = draw(st.sampled_from([0.5, 1, 2]))
        elif kind == "daily":
            h = draw(st.integers(0, 23))
            rec |= {"window": f"{h:02d}:{draw(st.sampled_from(['00', '30']))}-"
                              f"{(h + draw(st.integers(1, 3))) % 24:02d}:00",
                    "first_day": "2026-03-27", "last_day": "2026-04-05"}
        steps = [{"experiment": draw(st.sampled_from(["abw", "tat", "mptcp"])),
                  "parameters": {"d": draw(st.integers(1, 400)), "mb": draw(st.integers(1, 60))}}
                 for _ in range(draw(st.integers(1, 3)))]
        campaigns.append(campaign(
            f"c{i}", steps=steps, recurrence=rec, priority=draw(st.integers(0, 2)),
            repetitions=draw(st.integers(1, 3)), pause_s=draw(st.sampled_from([0, 60, 300])),
            missed=draw(st.sampled_from(["skip", "catch_up"])),
            submitted=NOW - timedelta(hours=draw(st.integers(0, 5)))))
    snapshot = Snapshot(now=NOW, nodes=nodes, catalogue=CATALOGUE,
                        quotas=LedgerState(sims=sims, sim_usage=usage), calendar=calendar,
                        padding_s=pad)
    return snapshot, campaigns, pad


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_no_two_bookings_overlap_on_a_node_padding_included(
    scenario: tuple[Snapshot, list[Campaign], int]
) -> None:
    s, cs, pad = scenario
    p = plan(s, cs, horizon=timedelta(days=10))
    gap = timedelta(seconds=pad)
    booked: dict[str, list[tuple[datetime, datetime]]] = {}
    for b in p.bookings():
        assert b.start >= s.now and b.end > b.start
        booked.setdefault(b.node, []).append((b.start, b.end))
    for n, intervals in booked.items():
        intervals.sort()
        for (_, a1), (b0, _) in pairwise(intervals):
            assert b0 >= a1 + gap
        for e in s.calendar:
            if e.node == n:
                assert all(b1 + gap <= e.start or e.end + gap <= b0 for b0, b1 in intervals)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_granted_reservations_fit_the_remaining_quota(
    scenario: tuple[Snapshot, list[Campaign], int]
) -> None:
    s, cs, _ = scenario
    p = plan(s, cs, horizon=timedelta(days=10))
    # every reservation the plan holds, replayed through the ledger, is granted ...
    led = QuotaLedger(s.quotas)
    for b in p.bookings():
        for r in b.reservations:
            got = led.reserve(sim=r.sim, project=r.project, nbytes=r.nbytes, at=r.period_start)
            assert isinstance(got, Reservation), got
    # ... and the plan's ledger is exactly that, within every usable cap
    assert led.state().sim_usage == p.quotas.sim_usage
    for (sim, _), u in p.quotas.sim_usage.items():
        assert u.used + u.reserved <= s.quotas.sims[sim].usable_bytes


def test_campaign_times_are_whole_seconds_so_sessions_match_across_replans() -> None:
    # Sessions are named by their window start in whole seconds; a spec given with
    # microseconds (datetime.now()) booked every session again on each re-plan.
    from orchestrator.scheduling.spec import parse_campaign

    spec = parse_campaign({
        "version": 2, "name": "x", "steps": [{"experiment": "tat"}],
        "recurrence": {"kind": "every", "hours": 1, "start": "2026-11-22T03:54:02.266720Z",
                       "end": "2026-11-22T06:54:02.5Z"},
        "time_scale": 60, "time_anchor": "2026-11-22T03:34:02.266720Z"})
    assert spec.recurrence.start.microsecond == 0  # type: ignore[union-attr]
    assert spec.recurrence.end.microsecond == 0  # type: ignore[union-attr]
    assert spec.time_anchor is not None and spec.time_anchor.microsecond == 0
