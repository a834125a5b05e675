"""Points of a compressed campaign's run move to campaign time, keeping their spacing."""

from __future__ import annotations

from datetime import timedelta

from orchestrator.timeseries.lineprotocol import Point, shifted


def test_shift_keeps_spacing_and_zero_is_identity() -> None:
    points = [Point("tat", {"bps": 1.0}, t, {"run": "r"}) for t in (1_000, 101_000_000)]
    assert shifted(points, timedelta(0)) is points
    moved = shifted(points, timedelta(hours=5, microseconds=3))
    offset = 5 * 3600 * 10**9 + 3000
    assert [p.time_ns for p in moved] == [1_000 + offset, 101_000_000 + offset]
    assert [p.fields for p in moved] == [p.fields for p in points]
    back = shifted(moved, timedelta(hours=-5, microseconds=-3))
    assert [p.time_ns for p in back] == [p.time_ns for p in points]
