"""Slot finding: no two bookings on a node overlap, padding included (property test)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.scheduling.slots import Slot, first_free_start, overlaps

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_fits_in_a_gap() -> None:
    busy = [Slot(T0, T0 + timedelta(seconds=10)), Slot(T0 + timedelta(seconds=40),
                                                       T0 + timedelta(seconds=50))]
    start = first_free_start(busy, earliest=T0, duration=timedelta(seconds=20),
                             padding=timedelta(seconds=5))
    assert start == T0 + timedelta(seconds=15)


@given(
    st.lists(st.tuples(st.integers(0, 3600), st.integers(1, 600)), max_size=30),
    st.integers(0, 60),
)
def test_bookings_never_overlap(requests: list[tuple[int, int]], pad: int) -> None:
    padding = timedelta(seconds=pad)
    booked: list[Slot] = []
    for earliest, length in requests:
        start = first_free_start(booked, earliest=T0 + timedelta(seconds=earliest),
                                 duration=timedelta(seconds=length), padding=padding)
        assert start >= T0 + timedelta(seconds=earliest)
        new = Slot(start, start + timedelta(seconds=length))
        widened = Slot(new.start - padding, new.end + padding)
        assert not any(overlaps(widened, b) for b in booked)
        booked.append(new)
