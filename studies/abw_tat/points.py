"""The ABw estimator's records (JSON lines, tools/abw) as ``abw`` points: an
ABw-TAT-ABw session's steps, or a plain ABw run's (docs/timeseries.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from orchestrator.study import (
    FieldValue,
    Measurement,
    Point,
    RunContext,
    RunInputs,
    field_specs,
    point,
    to_ns,
)

ABW = "abw"

MEASUREMENTS = (
    Measurement(ABW, field_specs(
        ("estimate_bps", "low_bps", "high_bps", "latency_s", "bytes", "packets_sent",
         "loss", "rtt_s", "step"), integers=("bytes", "packets_sent", "step"))),
)


#: An ABw-TAT-ABw session names each ABw step's records ``abw-<step>-<method>.jsonl``.
_ABW_STEP_FILE = re.compile(r"(?:^|/)abw-(\d+)-[^/]*\.jsonl$")


def abw_step(name: str) -> int | None:
    """The session step of an ABw records file, or None for a file of a plain ABw run:
    a session runs the same tool before and after each TAT, and only the step tells the
    two apart when its estimates are paired with that TAT."""
    m = _ABW_STEP_FILE.search(name)
    return int(m.group(1)) if m else None


def abw_points(records: Iterable[Mapping[str, Any]], ctx: RunContext, *,
               step: int | None = None) -> list[Point]:
    """The ABw tool's estimate records (JSON lines, tools/abw) as ``abw`` points; the
    session ``step`` is a field (not a tag: the series stay those of plain runs)."""
    out = []
    for r in records:
        if r.get("type") != "estimate":
            continue
        fields: dict[str, FieldValue | None] = {
            "estimate_bps": float(r["estimate_bps"]),
            "low_bps": _float(r.get("low_bps")),
            "high_bps": _float(r.get("high_bps")),
            "latency_s": float(r["latency_s"]),
            "bytes": int(r.get("bytes_sent", 0)) + int(r.get("control_bytes", 0)),
            "packets_sent": int(r.get("packets_sent", 0)),
            "loss": _float(r.get("loss")),
            "rtt_s": _float(r.get("rtt_s")),
            "step": step,
        }
        out.append(point(ABW, ctx, fields, to_ns(float(r["start_unix_s"])),
                         method=str(r["method"]), direction=str(r.get("direction", ""))))
    return out


def read_records(name: str, records: Sequence[Mapping[str, Any]],
                 ctx: RunContext) -> list[Point]:
    """The study's reader of records: a file's estimates, with the step its name tells."""
    return abw_points(records, ctx, step=abw_step(name))


def read_summary(result: Mapping[str, Any], inputs: RunInputs) -> list[Point]:
    """The session's own ``testbed.abw-tat`` summary gives no points: they come from its
    TAT results and ABw records, and the pages and releases pair them themselves."""
    return []


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
