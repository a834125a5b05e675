"""When a campaign may run: occurrence windows in wall-clock UTC.

Kinds: ``every`` N hours (absolute time from an anchor, so DST cannot shift or double
it), a ``daily`` window in each node's local time between two local dates, and a single
as-soon-as-possible window (also used by the low-priority idle queue).

Daily windows across DST. A window is the span from the first instant whose local
wall clock reads the start time to the first instant that reads the end time; a wall
time inside a spring-forward gap resolves to the instant the gap ends. So:

- the window of a day whose whole span falls in the gap (02:00-03:00 on a
  spring-forward day in Europe/Stockholm) is empty: that day is *skipped with a reason*,
  never booked at a local time that does not exist;
- a window that only starts in the gap (02:30-04:00) starts when the clocks resume;
- on fall-back, each local date yields one window (fold=0, the first pass of the
  repeated hour), so nothing is booked twice.

Time compression: a :class:`TimeScale` maps campaign time to wall time,
``wall = anchor + (t - anchor) / factor``. Every occurrence is computed in campaign
time and mapped through it; factor 1 is the identity, so demos and tests that compress
a day into minutes run the same code as production.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from zoneinfo import ZoneInfo

from orchestrator.errors import Invalid
from orchestrator.scheduling.bounds import (
    MAX_EVERY_HOURS,
    MAX_OCCURRENCES,
    next_day,
    scaled,
    shift,
)


class RecurrenceError(Invalid):
    """A recurrence that can never produce a window."""


class SkipCode(StrEnum):
    DST_GAP = "dst_gap"


@dataclass(frozen=True)
class TimeScale:
    """Campaign time runs ``factor`` times faster than wall time from ``anchor``."""

    factor: float = 1.0
    anchor: datetime = datetime(2000, 1, 1, tzinfo=UTC)

    def __post_init__(self) -> None:
        if not self.factor > 0:
            raise RecurrenceError(f"time_scale must be > 0, not {self.factor}")

    # Saturating (bounds.shift): a far date or a large factor cannot raise OverflowError.
    def to_wall(self, t: datetime) -> datetime:
        return shift(self.anchor, scaled(t - self.anchor, 1 / self.factor))

    def to_campaign(self, wall: datetime) -> datetime:
        return shift(self.anchor, scaled(wall - self.anchor, self.factor))

    def offset_at(self, wall: datetime) -> timedelta:
        """How far campaign time is ahead of wall time at ``wall``: a run started then
        is placed this much later in the time series, so a compressed day of hourly
        runs lands on a day's hours (zero at factor 1)."""
        return self.to_campaign(wall) - wall


@dataclass(frozen=True)
class Window:
    """One occurrence: book a session inside [start, end) (wall clock, UTC).

    ``nominal`` names the occurrence for idempotent re-planning: its start in campaign
    time, before any DST adjustment or compression."""

    start: datetime
    end: datetime
    nominal: datetime
    label: str


@dataclass(frozen=True)
class Skip:
    nominal: datetime
    code: SkipCode
    message: str


@dataclass(frozen=True)
class Occurrences:
    windows: tuple[Window, ...]
    skipped: tuple[Skip, ...] = ()


def resolve_local(day: date, at: time, tz: ZoneInfo) -> tuple[datetime, bool]:
    """The first instant (UTC) whose wall clock in ``tz`` reads ``day at``, and True;
    or, when that wall time falls in a DST gap, the instant the gap ends, and False."""
    naive = datetime.combine(day, at)
    first = naive.replace(tzinfo=tz, fold=0)
    instant = first.astimezone(UTC)
    if instant.astimezone(tz).replace(tzinfo=None) == naive:
        return instant, True
    # In a gap: fold=0 reads it with the old offset (a later instant), fold=1 with the
    # new one (earlier). The transition lies between; find it to the second.
    lo = naive.replace(tzinfo=tz, fold=1).astimezone(UTC)
    hi = instant
    after = hi.astimezone(tz).utcoffset()
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(tz).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0), False


def daily(
    *, window: tuple[time, time], first_day: date, last_day: date, tz: ZoneInfo,
    scale: TimeScale,
) -> Occurrences:
    """One window per local date in [first_day, last_day]; ``window[1] <= window[0]``
    means the window ends on the next day (e.g. 22:00-02:00)."""
    begin, finish = window
    if begin == finish:
        raise RecurrenceError(f"daily window {begin:%H:%M}-{finish:%H:%M} is empty")
    if last_day < first_day:
        raise RecurrenceError(f"daily window: last day {last_day} is before first day {first_day}")
    spec = f"{begin:%H:%M}-{finish:%H:%M}"
    days = (last_day - first_day).days + 1
    if days > MAX_OCCURRENCES:
        raise RecurrenceError(f"daily window {spec} from {first_day} to {last_day} is {days} "
                              f"windows; at most {MAX_OCCURRENCES}: split the campaign")
    windows: list[Window] = []
    skipped: list[Skip] = []
    day = first_day
    while day <= last_day:
        start, _ = resolve_local(day, begin, tz)
        end_day = day if finish > begin else next_day(day)
        end, _ = resolve_local(end_day, finish, tz)
        nominal = datetime.combine(day, begin).replace(tzinfo=tz, fold=0).astimezone(UTC)
        if end <= start:
            skipped.append(Skip(nominal, SkipCode.DST_GAP,
                f"window {spec} does not exist on {day} in {tz.key}: the clocks go forward "
                "through it; skipped that day"))
        else:
            windows.append(Window(scale.to_wall(start), scale.to_wall(end), start,
                                  f"{day} {spec} {tz.key}"))
        if day == last_day:
            break
        day = next_day(day)
    if not windows:
        raise RecurrenceError(
            f"daily window {spec} never occurs in {tz.key} between {first_day} and "
            f"{last_day}: " + "; ".join(s.message for s in skipped)
        )
    return Occurrences(tuple(windows), tuple(skipped))


def every(*, hours: float, start: datetime, end: datetime, scale: TimeScale) -> Occurrences:
    """Windows [start + k*period, start + (k+1)*period) that begin before ``end``
    (campaign time). Each window is one period long: a session may start anywhere in
    it, so a busy node can still fit the session later in the hour."""
    if not 0 < hours <= MAX_EVERY_HOURS:
        raise RecurrenceError(f"every: hours must be > 0 and at most {MAX_EVERY_HOURS}, "
                              f"not {hours}")
    if end <= start:
        raise RecurrenceError(
            f"every {hours} h between {start.isoformat()} and {end.isoformat()} never "
            "occurs: the end is not after the start"
        )
    period = timedelta(hours=hours)
    count = -(-(end - start) // period)  # ceil
    if count > MAX_OCCURRENCES:
        raise RecurrenceError(f"every {hours:g} h from {start.isoformat()} to {end.isoformat()} "
                              f"is {count} windows; at most {MAX_OCCURRENCES}: use a longer "
                              "period or a shorter span")
    windows = tuple(
        Window(scale.to_wall(t), scale.to_wall(shift(t, period)), t, f"{t:%Y-%m-%d %H:%M} UTC")
        for t in (shift(start, k * period) for k in range(count))
    )
    return Occurrences(windows)


def asap(*, earliest: datetime, until: datetime, nominal: datetime) -> Occurrences:
    """One window from ``earliest`` to ``until`` (wall clock; the planning horizon)."""
    return Occurrences((Window(earliest, until, nominal, "as soon as possible"),))


def parse_window(text: str) -> tuple[time, time]:
    """``"00:00-03:00"`` -> (00:00, 03:00)."""
    try:
        a, b = (time.fromisoformat(part.strip()) for part in text.split("-"))
    except ValueError as e:
        raise RecurrenceError(f"window {text!r}: expected HH:MM-HH:MM") from e
    return a, b
