"""Recurrence: local-time windows across DST (spring-forward gaps are skipped with a
reason, fall-back is booked once), windows that never occur, and time compression."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.scheduling.recurrence import (
    RecurrenceError,
    SkipCode,
    TimeScale,
    daily,
    every,
    parse_window,
    resolve_local,
)

ONE = TimeScale()
STO = ZoneInfo("Europe/Stockholm")
NYC = ZoneInfo("America/New_York")
LHI = ZoneInfo("Australia/Lord_Howe")


def windows_on(tz: ZoneInfo, window: str, day: date, days: int = 1) -> list[tuple[str, str]]:
    occ = daily(window=parse_window(window), first_day=day,
                last_day=day + timedelta(days=days - 1), tz=tz, scale=ONE)
    return [(f"{w.start.astimezone(tz):%m-%d %H:%M%z}", f"{w.end.astimezone(tz):%H:%M%z}")
            for w in occ.windows]


def test_spring_forward_skips_a_window_that_does_not_exist_that_day() -> None:
    occ = daily(window=parse_window("02:00-03:00"), first_day=date(2026, 3, 28),
                last_day=date(2026, 3, 30), tz=STO, scale=ONE)
    assert [w.label for w in occ.windows] == [
        "2026-03-28 02:00-03:00 Europe/Stockholm", "2026-03-30 02:00-03:00 Europe/Stockholm"]
    (skip,) = occ.skipped
    assert skip.code is SkipCode.DST_GAP
    assert "does not exist on 2026-03-29 in Europe/Stockholm" in skip.message


def test_a_window_starting_in_the_gap_starts_when_the_clocks_resume() -> None:
    assert windows_on(NYC, "02:30-04:00", date(2026, 3, 8)) == [
        ("03-08 03:00-0400", "04:00-0400")]


def test_fall_back_books_the_repeated_hour_once() -> None:
    got = windows_on(NYC, "01:00-03:00", date(2026, 10, 31), days=3)
    assert got == [("10-31 01:00-0400", "03:00-0400"), ("11-01 01:00-0400", "03:00-0500"),
                   ("11-02 01:00-0500", "03:00-0500")]


def test_lord_howe_half_hour_dst() -> None:
    occ = daily(window=parse_window("02:00-02:30"), first_day=date(2026, 10, 3),
                last_day=date(2026, 10, 5), tz=LHI, scale=ONE)
    assert len(occ.windows) == 2 and "2026-10-04" in occ.skipped[0].message
    back = windows_on(LHI, "01:30-02:00", date(2026, 4, 5))
    assert back == [("04-05 01:30+1100", "02:00+1030")]  # the repeated half hour, once


def test_overnight_window_ends_the_next_day() -> None:
    assert windows_on(STO, "22:00-02:00", date(2026, 1, 10)) == [
        ("01-10 22:00+0100", "02:00+0100")]


def test_a_window_that_never_occurs_is_an_error() -> None:
    with pytest.raises(RecurrenceError, match="never occurs in Europe/Stockholm between "
                       "2026-03-29 and 2026-03-29.*clocks go forward"):
        daily(window=parse_window("02:00-03:00"), first_day=date(2026, 3, 29),
              last_day=date(2026, 3, 29), tz=STO, scale=ONE)


@pytest.mark.parametrize(("call", "says"), [
    (lambda: daily(window=parse_window("03:00-03:00"), first_day=date(2026, 1, 1),
                   last_day=date(2026, 1, 2), tz=STO, scale=ONE), "is empty"),
    (lambda: daily(window=parse_window("00:00-03:00"), first_day=date(2026, 1, 2),
                   last_day=date(2026, 1, 1), tz=STO, scale=ONE), "before first day"),
    (lambda: every(hours=1, start=datetime(2026, 1, 2, tzinfo=UTC),
                   end=datetime(2026, 1, 2, tzinfo=UTC), scale=ONE), "never occurs"),
    (lambda: parse_window("midnight"), "expected HH:MM-HH:MM"),
    (lambda: TimeScale(0), "time_scale must be > 0"),
])
def test_bad_recurrences(call: object, says: str) -> None:
    with pytest.raises(RecurrenceError, match=says):
        call()  # type: ignore[operator]


def test_time_scale_compresses_hours_into_minutes() -> None:
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    occ = every(hours=1, start=t0, end=t0 + timedelta(hours=24), scale=TimeScale(60, t0))
    assert len(occ.windows) == 24
    assert [w.start - t0 for w in occ.windows[:3]] == [timedelta(minutes=m) for m in (0, 1, 2)]
    assert occ.windows[-1].end == t0 + timedelta(minutes=24)
    assert occ.windows[5].nominal == t0 + timedelta(hours=5)  # named in campaign time


def test_compressed_daily_window_keeps_local_time_semantics() -> None:
    anchor = datetime(2026, 3, 27, 23, tzinfo=UTC)
    scale = TimeScale(24 * 60, anchor)  # a day per minute
    occ = daily(window=parse_window("02:00-03:00"), first_day=date(2026, 3, 28),
                last_day=date(2026, 3, 30), tz=STO, scale=scale)
    assert len(occ.windows) == 2 and len(occ.skipped) == 1
    assert all(w.end - w.start == timedelta(seconds=2.5) for w in occ.windows)


ZONES = st.sampled_from(["Europe/Stockholm", "America/New_York", "Australia/Lord_Howe",
                         "Asia/Kolkata", "America/Santiago", "UTC"])
QUARTERS = st.integers(0, 95).map(lambda q: time(q // 4, 15 * (q % 4)))
# Ranges that cover the transitions of all these zones in 2026.
STARTS = st.sampled_from([date(2026, 3, 6), date(2026, 3, 27), date(2026, 4, 2),
                          date(2026, 9, 4), date(2026, 10, 1), date(2026, 10, 23),
                          date(2026, 10, 30)])


@settings(max_examples=300, deadline=None)
@given(ZONES, QUARTERS, QUARTERS, STARTS, st.integers(1, 12))
def test_local_windows_hold_across_dst(zone: str, a: time, b: time, first: date,
                                       days: int) -> None:
    tz = ZoneInfo(zone)
    last = first + timedelta(days=days - 1)
    try:
        occ = daily(window=(a, b), first_day=first, last_day=last, tz=tz, scale=ONE)
    except RecurrenceError:
        assert a == b or days <= 2  # only an empty window or a gap-only range
        return
    # every local day gets exactly one window or one stated skip: nothing booked twice
    assert len(occ.windows) + len(occ.skipped) == days
    for w, nxt in zip(occ.windows, occ.windows[1:], strict=False):
        assert w.end <= nxt.start
    for w in occ.windows:
        assert w.start < w.end
        local = w.start.astimezone(tz)
        _, existed = resolve_local(local.date(), a, tz)
        if existed:  # the first instant whose wall clock reads the start time
            assert local.time() == a and local.fold == 0
        else:  # the start was in a gap: the window begins where the clocks resume
            before = (w.start - timedelta(seconds=1)).astimezone(tz)
            assert before.utcoffset() != local.utcoffset()
        assert w.end.astimezone(tz).time() == b or not resolve_local(
            w.end.astimezone(tz).date(), b, tz)[1]


@given(st.floats(0.01, 1e4), st.integers(0, 10**9))
def test_time_scale_round_trips(factor: float, seconds: int) -> None:
    scale = TimeScale(factor, datetime(2026, 1, 1, tzinfo=UTC))
    t = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)
    # wall times have microsecond resolution, so campaign time is exact to factor µs
    error = abs((scale.to_campaign(scale.to_wall(t)) - t).total_seconds())
    assert error <= (factor + 1) * 1e-6


def test_offset_places_compressed_runs_on_the_campaign_hours() -> None:
    # 180x from the anchor: 20 s of wall time is an hour of campaign time, so the run
    # booked 100 s after the anchor belongs 5 h later, whatever the hour of the wall.
    anchor = datetime(2026, 11, 24, 2, 0, tzinfo=UTC)
    scale = TimeScale(180, anchor)
    assert scale.offset_at(anchor) == timedelta(0)
    booked = anchor + timedelta(seconds=100)
    assert booked + scale.offset_at(booked) == anchor + timedelta(hours=5)
    assert ONE.offset_at(booked) == timedelta(0)
