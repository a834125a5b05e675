"""Finding time on a node. One experiment holds a node at a time (all its interfaces:
experiments on different modems of one node share CPU and the backhaul), with padding
between slots for container start/stop and radio idle."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, order=True)
class Slot:
    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"slot ends ({self.end}) before it starts ({self.start})")


def first_free_start(
    busy: Iterable[Slot], *, earliest: datetime, duration: timedelta, padding: timedelta
) -> datetime:
    """The earliest start >= ``earliest`` whose slot, widened by ``padding`` on both
    sides, overlaps none of ``busy``."""
    start = earliest
    for slot in sorted(busy):
        if slot.end + padding <= start:
            continue
        if start + duration + padding <= slot.start:
            break
        start = max(start, slot.end + padding)
    return start


def overlaps(a: Slot, b: Slot) -> bool:
    return a.start < b.end and b.start < a.end
