"""Bounded value types for every message the orchestrator accepts (pure: pydantic only).

Why: a value the store cannot hold, or a string that breaks the line protocol or a log
line, used to pass validation and fail later as a 500. Each type here says once what
the store and the downstream formats can carry, and every request schema, path, query
and header parameter is built from them:

- integers fit a signed 64-bit column (SQLite INTEGER, PostgreSQL BIGINT), or a 32-bit
  one (PostgreSQL INTEGER) where the column is that narrow;
- floats are finite (JSON has no NaN or infinity, and neither has a quota);
- datetimes carry an offset (naive ones cannot be compared with the orchestrator's
  clock) and lie between 2000 and 2200 (later ones overflow date arithmetic);
- ids and labels have a safe alphabet and the length of their column; free text has a
  length and no NUL (PostgreSQL text cannot hold it); labels have no control
  characters at all, so a line break never reaches a line-protocol tag or a log line.

Lists of ids are merged when they hold duplicates (the same id twice means the same
thing once); lists of reports keyed by name are refused (two reports of one interface
contradict each other): see :func:`merged` and :func:`unique_by`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from datetime import UTC, datetime
from typing import Annotated, TypeVar

from pydantic import AfterValidator, AwareDatetime, Field, StringConstraints

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1

#: Bytes, sizes, counters: what a BIGINT column holds.
ByteCount = Annotated[int, Field(ge=0, le=INT64_MAX)]
PositiveByteCount = Annotated[int, Field(gt=0, le=INT64_MAX)]
#: Small counts kept in an INTEGER column (PostgreSQL: 32 bits).
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
#: A clock offset or similar, seconds: finite and within about 30 years.
Seconds = Annotated[float, Field(allow_inf_nan=False, ge=-1e9, le=1e9)]

EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)


def _in_era(value: datetime) -> datetime:
    if not EARLIEST <= value <= LATEST:
        raise ValueError(f"must lie between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d}")
    return value


#: A point in time with its UTC offset, between 2000 and 2200.
Instant = Annotated[AwareDatetime, AfterValidator(_in_era)]

#: No control character (C0 or DEL): safe in a tag, a header or a log line.
LABEL_PATTERN = r"^[^\x00-\x1f\x7f]*$"
#: No NUL: what PostgreSQL text holds. Line breaks allowed (failure reasons, logs).
TEXT_PATTERN = r"^[^\x00]*$"

#: Node ids appear in paths, tags and archive folders (column: 64 characters).
NODE_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
#: Run and campaign ids (``r-20261122T120000-1a2b3c4d``; column: 40 characters).
RECORD_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$"
#: User and project names (column: 64 characters).
NAME_PATTERN = r"^[a-zA-Z0-9_.-]{1,64}$"
#: Experiment names, as folders of the catalogue (column: 64 characters).
EXPERIMENT_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
#: Linux interface names: IFNAMSIZ is 16 with the NUL (column: 16 characters).
INTERFACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}$"
#: Node tags, used in selection expressions (``tag:dual-sim``).
TAG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:=-]{0,63}$"
#: IANA time zone names (``Europe/Stockholm``); the service checks the zone exists.
TIMEZONE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_+/-]{0,63}$"

NodeIdStr = Annotated[str, StringConstraints(pattern=NODE_ID_PATTERN, max_length=63)]
RecordIdStr = Annotated[str, StringConstraints(pattern=RECORD_ID_PATTERN, max_length=40)]
NameStr = Annotated[str, StringConstraints(pattern=NAME_PATTERN, max_length=64)]
ExperimentStr = Annotated[str, StringConstraints(pattern=EXPERIMENT_PATTERN, max_length=64)]
InterfaceStr = Annotated[str, StringConstraints(pattern=INTERFACE_PATTERN, max_length=15)]
TagStr = Annotated[str, StringConstraints(pattern=TAG_PATTERN, max_length=64)]
TimezoneStr = Annotated[str, StringConstraints(pattern=TIMEZONE_PATTERN, max_length=64)]
#: Labels: operator names, models, versions (columns of 8 to 64 characters).
Label8 = Annotated[str, StringConstraints(pattern=LABEL_PATTERN, max_length=8)]
Label32 = Annotated[str, StringConstraints(pattern=LABEL_PATTERN, max_length=32)]
Label64 = Annotated[str, StringConstraints(pattern=LABEL_PATTERN, max_length=64)]
#: A campaign's name: shown on pages and stored in a text column (no NUL or control).
Label128 = Annotated[str, StringConstraints(pattern=LABEL_PATTERN, min_length=1, max_length=128)]
#: Free text (reasons): one screen of it, no NUL.
Reason = Annotated[str, StringConstraints(pattern=TEXT_PATTERN, min_length=1, max_length=2000)]

T = TypeVar("T")
H = TypeVar("H", bound=Hashable)


def merged(items: Sequence[H]) -> list[H]:
    """Duplicates dropped, first occurrence kept in place."""
    return list(dict.fromkeys(items))


def unique_by(key: Callable[[T], Hashable], what: str) -> Callable[[list[T]], list[T]]:
    """A validator refusing a list where two items share ``key``, naming the key."""

    def check(items: list[T]) -> list[T]:
        seen: set[Hashable] = set()
        for item in items:
            k = key(item)
            if k in seen:
                raise ValueError(f"{what} {k!r} is listed twice; send each once")
            seen.add(k)
        return items

    return check


#: A list of ids with duplicates merged.
IdList = Annotated[list[RecordIdStr], Field(max_length=1000), AfterValidator(merged)]
TagList = Annotated[list[TagStr], Field(max_length=32), AfterValidator(merged)]
NameList = Annotated[list[NameStr], Field(max_length=100), AfterValidator(merged)]
