"""A ``testbed.goodput-sequence`` result as points (docs/goodput-sequence.md): one
``goodput`` point per transfer, one ``goodput_summary`` per run."""

from __future__ import annotations

from collections.abc import Mapping
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
from testbed_kit import goodput

GOODPUT = "goodput"
GOODPUT_SUMMARY = "goodput_summary"

MEASUREMENTS = (
    Measurement(GOODPUT, field_specs(
        ("goodput_bps", "bytes", "total_s", "connect_s", "first_byte_s", "index"),
        integers=("bytes", "index"))),
    Measurement(GOODPUT_SUMMARY, field_specs(
        ("g1_bps", "median_bps", "mean_bps", "q1_bps", "q3_bps", "ci_low_bps",
         "ci_high_bps", "ci_level", "g1_excess_s", "g1_below_ci", "transfers", "size_bytes",
         "idle_gap_s"),
        integers=("transfers", "size_bytes"), booleans=("g1_below_ci",))),
)


def goodput_points(result: Mapping[str, Any], ctx: RunContext) -> list[Point]:
    """A ``testbed.goodput-sequence`` v1 result as one ``goodput`` point per transfer (at
    its start) and a ``goodput_summary`` at the first one's start, tagged with the
    direction and ``size`` (D in bytes, as text: the page's boxes group by it). The
    figures are recomputed from the transfers with the kit's code, never copied from
    the file's own summary."""
    rates = goodput.transfer_goodputs(result)  # checks format, version and bytes
    summary = goodput.summarise(rates, int(result["size_bytes"]))
    tags = {"direction": str(result["direction"]), "size": str(int(result["size_bytes"]))}
    points = [
        point(GOODPUT, ctx, {"goodput_bps": rate, "bytes": int(t["bytes"]),
                             "total_s": float(t["total_s"]), "connect_s": float(t["connect_s"]),
                             "first_byte_s": _float(t.get("first_byte_s")),
                             "index": int(t["index"])},
              to_ns(str(t["start"])), **tags)
        for t, rate in zip(result["transfers"], rates, strict=True)
    ]
    fields: dict[str, FieldValue | None] = {
        **summary.as_dict(), "size_bytes": int(result["size_bytes"]),
        "idle_gap_s": float(result["idle_gap_s"])}
    points.append(point(GOODPUT_SUMMARY, ctx, fields, points[0].time_ns, **tags))
    return points


def read(result: Mapping[str, Any], inputs: RunInputs) -> list[Point]:
    """The study's reader: the result's points (it joins nothing)."""
    return goodput_points(result, inputs.ctx)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
