"""A ``testbed.abw-tools`` result as points: one ``abw_tools`` point per estimate,
against the TATs around it."""

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
from testbed_kit import abw_tools

ABW_TOOLS = "abw_tools"

MEASUREMENTS = (
    Measurement(ABW_TOOLS, field_specs(
        ("estimate_bps", "tat_bps", "error", "latency_s", "probe_bytes", "probe_packets",
         "control_bytes", "overhead", "repetition", "step", "tats"),
        integers=("probe_bytes", "probe_packets", "control_bytes", "repetition", "step",
                  "tats"))),
)


def abw_tools_points(result: Mapping[str, Any], ctx: RunContext) -> list[Point]:
    """A ``testbed.abw-tools`` v1 result as one ``abw_tools`` point per estimate (at its
    start), paired with the TATs around it by the kit's code
    (:func:`testbed_kit.abw_tools.pair`), tagged with ``direction``, ``method`` and
    ``size`` (probe bytes, as text)."""
    parsed = abw_tools.parse_result(result)
    out = []
    for p in abw_tools.pair(parsed):
        e = p.estimate
        fields: dict[str, FieldValue | None] = {
            "estimate_bps": e.estimate_bps, "tat_bps": p.tat_bps, "error": p.error,
            "latency_s": e.latency_s, "probe_bytes": e.probe_bytes,
            "probe_packets": e.probe_packets, "control_bytes": e.control_bytes,
            "overhead": p.overhead, "repetition": e.repetition, "step": e.step,
            "tats": p.tats}
        out.append(point(ABW_TOOLS, ctx, fields, to_ns(e.start_unix_s),
                         direction=parsed.direction, method=e.cell.method,
                         size=str(e.cell.size)))
    return out


def read(result: Mapping[str, Any], inputs: RunInputs) -> list[Point]:
    """The study's reader: the result's points (it joins nothing)."""
    return abw_tools_points(result, inputs.ctx)
