"""A ``testbed.tat`` result as points: one ``tat`` point per receiver bin (100 ms), one
``tat_summary`` per transfer with the operator's policing profile (docs/timeseries.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.analysis.policing import MIN_BINS, classify_policing
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
from testbed_kit import tat_result

TAT = "tat"
TAT_SUMMARY = "tat_summary"

MEASUREMENTS = (
    Measurement(TAT, field_specs(("bps", "bytes", "duration_s"), integers=("bytes",))),
    Measurement(TAT_SUMMARY, field_specs(
        ("mean_bps", "bytes", "sender_bytes", "duration_s", "retransmits", "bins",
         "policing", "stable_bps", "time_to_90_s", "peak_bps", "drop_s"),
        integers=("bytes", "sender_bytes", "retransmits", "bins"), strings=("policing",))),
)


def tat_points(result: Mapping[str, Any], ctx: RunContext) -> list[Point]:
    """A ``testbed.tat`` v1 result as one ``tat`` point per bin and a ``tat_summary``.

    Bins are stamped at the transfer start plus the bin's offset; the summary at the
    start, with the policing profile when the transfer is long enough to show one.
    """
    if (result.get("format") != tat_result.FORMAT
            or int(result.get("version", 0)) != tat_result.VERSION):
        raise ValueError(f"not a {tat_result.FORMAT} v{tat_result.VERSION} result: "
                         f"{result.get('format')!r} v{result.get('version')}")
    start = to_ns(str(result["start"]))
    direction = str(result["direction"])
    points = [
        point(TAT, ctx, {"bps": float(b["bits_per_second"]), "bytes": int(b["bytes"]),
                         "duration_s": float(b["duration_s"])},
              start + round(float(b["t_s"]) * 1e9), direction=direction)
        for b in result["bins"]
    ]
    summary: dict[str, FieldValue | None] = {
        "mean_bps": float(result["mean_bps"]),
        "bytes": int(result["bytes"]),
        "sender_bytes": int(result["sender_bytes"]),
        "duration_s": float(result["duration_s"]),
        "retransmits": result.get("retransmits"),
        "bins": len(result["bins"]),
    }
    bin_s = float(result["bin_s"])
    rates = [float(b["bits_per_second"]) for b in result["bins"]
             if float(b["duration_s"]) >= bin_s * 0.9]  # the short tail bin is no rate
    if len(rates) >= MIN_BINS:
        profile = classify_policing(rates, bin_s=bin_s)
        summary.update(policing=profile.kind.value, stable_bps=profile.stable_bps,
                       time_to_90_s=profile.time_to_90_s, peak_bps=profile.peak_bps,
                       drop_s=profile.drop_s)
    points.append(point(TAT_SUMMARY, ctx, summary, start, direction=direction))
    return points


def read(result: Mapping[str, Any], inputs: RunInputs) -> list[Point]:
    """The study's reader: the result's points (it joins nothing)."""
    return tat_points(result, inputs.ctx)
