"""A ``testbed.short-flows`` result joined with its capture: one row per flow (pure).

The experiment records each flow's size and local port; the run's capture (the node's
tcpdump of the interface, analysed by ``testbed-flows`` or its reference,
:mod:`orchestrator.analysis.flows`) gives that connection's completion time (first SYN
to the last data byte ACKed), handshake RTT and retransmissions. The two meet on the
connection: client port = the flow's local port, server port = the responder's.

Each flow gets a ``status``:

- ``ok``: measured;
- ``excluded``: the capture shows a SYN or FIN retransmission, so the completion time
  holds a handshake or teardown timeout (Garcia et al. leave such flows out); written,
  so the exclusions are counted, but never averaged;
- ``failed``: the client reported an error (no completion time);
- ``uncaptured``: no connection in the capture matches (no capture in the bundle, or
  it was cut by its size cap).

:func:`short_flow_points` turns the rows into ``short_flows`` points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.analysis.flows import FlowStats
from orchestrator.study import (
    Measurement,
    Point,
    RunContext,
    RunInputs,
    field_specs,
    point,
)
from testbed_kit import short_flows
from testbed_kit.short_flows import ShortFlowsResult

SHORT_FLOWS = "short_flows"
#: The fields of a ``short_flows`` point (docs/timeseries.md).
SHORT_FLOWS_FIELDS = frozenset({
    "size_bytes", "index", "status", "fct_s", "rtt_3whs_s", "retrans_packets",
    "retrans_pct", "syn_fin_retrans", "throughput_bps", "tool_s",
})
STATUSES = ("ok", "excluded", "failed", "uncaptured")
MEASUREMENTS = (
    Measurement(SHORT_FLOWS, field_specs(
        sorted(SHORT_FLOWS_FIELDS), integers=("size_bytes", "index", "retrans_packets",
                                              "syn_fin_retrans"), strings=("status",))),
)


@dataclass(frozen=True)
class FlowRow:
    """One flow's figures; ``time_ns`` is the connection's first packet in the capture
    (the client's connect() when uncaptured), on the node's clock."""

    time_ns: int
    kind: str
    fields: Mapping[str, float | int | str | None]


def _captured(result: ShortFlowsResult, flows: Sequence[FlowStats]
              ) -> dict[int, FlowStats]:
    """The capture's connections to the responder, by client port (the first seen
    when a port was reused, which a session's dozen connections never do)."""
    out: dict[int, FlowStats] = {}
    for f in sorted(flows, key=lambda f: f.start_ns):
        if f.connection.server.port == result.port:
            out.setdefault(f.connection.client.port, f)
    return out


def flow_rows(result: ShortFlowsResult, flows: Sequence[FlowStats]) -> list[FlowRow]:
    """Every flow of ``result``, with its figures from the capture's ``flows``."""
    by_port = _captured(result, flows)
    rows = []
    for rec in result.flows:
        fields: dict[str, float | int | str | None] = {
            "size_bytes": rec.size_bytes, "index": rec.index, "tool_s": rec.tool_s}
        got = by_port.get(rec.local_port) if rec.error is None else None
        if rec.error is not None:
            fields["status"] = "failed"
        elif got is None:
            fields["status"] = "uncaptured"
        else:
            fields.update(
                status="excluded" if got.syn_fin_retrans else "ok",
                fct_s=got.fct_s, rtt_3whs_s=got.rtt_3whs_s,
                retrans_packets=got.retrans_packets, retrans_pct=got.retrans_pct,
                syn_fin_retrans=got.syn_fin_retrans,
                throughput_bps=(rec.size_bytes * 8 / got.fct_s) if got.fct_s else None)
        time_ns = got.start_ns if got is not None else round(rec.start_unix_s * 1e9)
        rows.append(FlowRow(time_ns=time_ns, kind=rec.kind, fields=fields))
    return rows


def short_flow_points(result: Mapping[str, Any], flows: Sequence[FlowStats],
                      ctx: RunContext) -> list[Point]:
    """A ``testbed.short-flows`` v1 result, joined with the run's captured ``flows``
    (:func:`flow_rows`), as one ``short_flows`` point per flow, tagged with
    ``direction``, ``kind`` (short/long) and ``size`` (bytes)."""
    parsed = short_flows.parse_result(result)
    return [point(SHORT_FLOWS, ctx, row.fields, row.time_ns, direction=parsed.direction,
                  kind=row.kind, size=str(row.fields["size_bytes"]))
            for row in flow_rows(parsed, flows)]


def read(result: Mapping[str, Any], inputs: RunInputs) -> list[Point]:
    """The study's reader: the result joined with every capture of the run."""
    return short_flow_points(result, inputs.flows, inputs.ctx)
