"""Durations as people say them, the one way the orchestrator writes a span of time
for a reader: run notes (out of contact, a run's horizon), ``testbed run wait``'s lines
and the fleet page's "last heard" column all use :func:`spoken`. Pure."""

from __future__ import annotations

_MINUTE, _HOUR, _DAY = 60, 3600, 86400


def spoken(seconds: float) -> str:
    """A duration as people say it, to the second and at most two units, the larger
    first: "40 s", "1 min 40 s", "2 h 5 min", "7 days", "2 days 2 h". A negative span
    (a clock a little behind) is "0 s"."""
    s = max(0, round(seconds))
    if s < _MINUTE:
        return f"{s} s"
    if s < _HOUR:
        m, rest = divmod(s, _MINUTE)
        return f"{m} min {rest} s" if rest else f"{m} min"
    if s < _DAY:
        h, rest = divmod(s, _HOUR)
        m = rest // _MINUTE
        return f"{h} h {m} min" if m else f"{h} h"
    d, rest = divmod(s, _DAY)
    h = rest // _HOUR
    days = f"{d} day" + ("s" if d != 1 else "")
    return f"{days} {h} h" if h else days
