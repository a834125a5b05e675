"""Time-series points and their InfluxDB line-protocol text (pure: no I/O).

Line protocol is what InfluxDB 1.x, 2.x and 3.x all accept on their v1 ``/write``
endpoint, so the platform writes nothing else. Escaping follows the 1.x reference
(https://docs.influxdata.com/influxdb/v1/write_protocols/line_protocol_reference/):
measurement names escape commas and spaces; tag keys, tag values and field keys also
escape equals signs; string field values are double-quoted with ``"`` and ``\\``
escaped. Integers carry an ``i`` suffix (otherwise they are stored as floats and a later
integer write to the same field is refused). Timestamps are integer nanoseconds.

This module also holds the seam the ingest service writes through,
:class:`TimeSeriesSink`; its real implementation is :class:`~.influx.InfluxClient`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Protocol

FieldValue = float | int | bool | str

_MEASUREMENT_ESCAPES = str.maketrans({",": r"\,", " ": r"\ "})
_KEY_ESCAPES = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ "})
_STRING_ESCAPES = str.maketrans({'"': r"\"", "\\": "\\\\"})


@dataclass(frozen=True)
class Point:
    """One point: a measurement, its tags (indexed), fields (values) and time in ns."""

    measurement: str
    fields: Mapping[str, FieldValue | None]  # None: not measured this time, left out
    time_ns: int
    tags: Mapping[str, str] = field(default_factory=dict)


class TimeSeriesSink(Protocol):
    """Where points go. ``write`` returns how many were stored, or raises."""

    def write(self, points: Sequence[Point]) -> int: ...


def _no_newline(text: str, what: str) -> str:
    if "\n" in text or "\r" in text:
        raise ValueError(f"{what} {text!r} contains a line break, which line protocol cannot "
                         "carry")
    return text


def escape_measurement(name: str) -> str:
    if not name:
        raise ValueError("a measurement needs a name")
    return _no_newline(name, "measurement").translate(_MEASUREMENT_ESCAPES)


def escape_key(text: str) -> str:
    """Tag keys, tag values and field keys."""
    if text.endswith("\\"):
        # A trailing backslash would escape the separator after it (1.x parser).
        raise ValueError(f"tag or field text {text!r} ends with a backslash")
    return _no_newline(text, "tag or field").translate(_KEY_ESCAPES)


def format_value(value: FieldValue) -> str:
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"integer field value {value} does not fit InfluxDB's 64 bits")
        return f"{value}i"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"field value {value} is not finite; InfluxDB stores no NaN or inf")
        return repr(value)
    if isinstance(value, str):
        return '"' + value.translate(_STRING_ESCAPES) + '"'
    raise TypeError(f"field values are float, int, bool or str, not {type(value).__name__}")


def encode(point: Point) -> str:
    """One point as a line (without the newline).

    Tags with empty values are left out (line protocol has no empty tag value), tags are
    sorted by key as InfluxDB recommends, and fields whose value is None or NaN are
    dropped; a point left with no field at all is an error.
    """
    parts = [escape_measurement(point.measurement)]
    for key in sorted(point.tags):
        value = point.tags[key]
        if value != "":
            parts.append(f"{escape_key(key)}={escape_key(value)}")
    fields = [
        f"{escape_key(k)}={format_value(v)}"
        for k, v in point.fields.items()
        if v is not None and not (isinstance(v, float) and math.isnan(v))
    ]
    if not fields:
        raise ValueError(f"point of {point.measurement!r} at {point.time_ns} has no field")
    return f"{','.join(parts)} {','.join(fields)} {int(point.time_ns)}"


def encode_batch(points: Iterable[Point]) -> bytes:
    """Points as a ``/write`` request body: one line each, UTF-8."""
    return "".join(encode(p) + "\n" for p in points).encode()


def shifted(points: list[Point], offset: timedelta) -> list[Point]:
    """The points moved by ``offset`` (to the microsecond, as stored times are): to
    campaign time, or from a node's clock to the orchestrator's."""
    ns = (offset.days * 86_400 + offset.seconds) * 1_000_000_000 + offset.microseconds * 1000
    return points if ns == 0 else [replace(p, time_ns=p.time_ns + ns) for p in points]
