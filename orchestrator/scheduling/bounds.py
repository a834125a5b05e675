"""What one campaign may ask of the planner, and date arithmetic that cannot overflow.

A campaign is submitted by any user with a token, and every later planning pass works
on it while holding the planner lock. So every field that scales the planner's work
(windows, runs per session, nodes listed, the length of the selection) is bounded at
validation, with a message that names the limit and what to change, and every date is
held to a horizon (:data:`EARLIEST` .. submission + ``max_ahead``) far from the ends of
Python's calendar (year 1 and 9999, where ``datetime + timedelta`` raises
``OverflowError``). The arithmetic in :mod:`.recurrence` also goes through
:func:`shift`, which saturates instead of raising, so no stored spec can make a
planning pass raise, whatever rule it was accepted under.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

#: No campaign date before this: the platform did not exist, and a window that far in
#: the past would only be expanded to be skipped as missed.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
#: Absolute backstop behind the relative horizon (settings.scheduling
#: .campaign_max_ahead_days): a stored spec is re-checked against it on every pass.
LATEST = datetime(2200, 1, 1, tzinfo=UTC)
#: Occurrence windows one campaign may expand to (per node time zone). 10,000 is more
#: than a year of hourly sessions (8,784) or 27 years of daily ones; beyond it, split the
#: campaign or use a longer period.
MAX_OCCURRENCES = 10_000
#: Shortest ``every`` period, hours: 5 minutes. A session (a run, padding, set-up) takes
#: minutes; a shorter period only multiplies windows that cannot hold one.
MIN_EVERY_HOURS = 5 / 60
#: Longest ``every`` period, hours: a year (a leap one).
MAX_EVERY_HOURS = 24 * 366
#: Steps in one session, and runs per session (steps x repetitions): each run is a row
#: per interface and a slot on the node.
MAX_STEPS = 50
MAX_RUNS_PER_SESSION = 1000
#: Node ids a campaign may list (the selection chooses among them); a fleet of
#: thousands is selected by tags, not by listing.
MAX_NODES = 1000
#: Parameters one step may set (manifests declare about ten).
MAX_PARAMETERS = 64

_MIN = datetime.min.replace(tzinfo=UTC)
_MAX = datetime.max.replace(tzinfo=UTC)


def shift(t: datetime, delta: timedelta) -> datetime:
    """``t + delta``, saturated at the ends of the calendar instead of raising
    ``OverflowError``. Inside the campaign horizon it is exactly ``t + delta``."""
    try:
        return t + delta
    except OverflowError:
        return _MAX if delta > timedelta(0) else _MIN


def scaled(delta: timedelta, factor: float) -> timedelta:
    """``delta * factor``, saturated at ``timedelta``'s range instead of raising."""
    try:
        return delta * factor
    except OverflowError:
        return timedelta.max if (delta > timedelta(0)) == (factor > 0) else timedelta.min


def next_day(day: date) -> date:
    """The day after ``day``; the last day of the calendar has none and stays put
    (callers loop up to a bounded last day, so it is never reached in practice)."""
    try:
        return day + timedelta(days=1)
    except OverflowError:
        return day


def out_of_horizon(value: datetime | date, *, latest: datetime = LATEST) -> str | None:
    """Why ``value`` is outside [EARLIEST, latest), or None when it is inside."""
    as_dt = value if isinstance(value, datetime) else datetime(
        value.year, value.month, value.day, tzinfo=UTC)
    if as_dt < EARLIEST:
        return f"{value.isoformat()} is before {EARLIEST:%Y-%m-%d}"
    if as_dt >= latest:
        return f"{value.isoformat()} is {latest:%Y-%m-%d} or later"
    return None
