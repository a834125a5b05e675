"""A ``testbed.cca-compare`` result joined with the sender's capture and the modem
samples of each transfer's span: one row per transfer, and its throughput bins (pure).

The experiment records each transfer's congestion control, kind, local port and span;
the capture at the sender (the server's for downlink, ``server/capture/``; the node's
for uplink, under ``results/``), analysed by ``testbed-flows`` or its reference
(:mod:`orchestrator.analysis.flows`), gives that connection's figures. They meet on the
connection: client port = the transfer's local port, server port = the responder's.
From the sender's side of the connection:

- throughput: unique bytes (the in-order stream's advance) over the time from the SYN
  to the last byte ACKed, and the same advance in 100 ms bins;
- self-inflicted delay: each data segment's RTT (sent once, to the first ACK covering
  it) above the connection's smallest, its mean, median and p95;
- retransmission %: data segments starting below the highest sequence already sent;
- duplicate-ACK %: pure ACKs repeating the previous ACK number and window while data
  is outstanding, of all pure ACKs.

The modem samples are the node's metadata stream for the run (``meta/modem.jsonl``,
one sample per interface every ``metadata_interval_s``). A transfer gets the samples
inside its span, or the last one before it when none fell inside (a short download):
their mean SINR and RSRP, the band and cell of the first; and ``handovers``, how many
times the modem's handover counter (its cell when it keeps no counter) moved between
the last sample before the transfer and the first after it. That window is the
transfer widened by up to one sampling interval each side: a handover counted for a
one-second download may have happened just before or after it.

Each transfer gets a ``status``: ``ok``; ``failed`` (the client reported an error);
``uncaptured`` (no connection in the sender's capture matches).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
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
from testbed_kit import cca_compare
from testbed_kit.cca_compare import CcaCompareResult, Transfer

CCA_COMPARE = "cca_compare"
CCA_BINS = "cca_bins"
#: The fields of a ``cca_compare`` point (docs/timeseries.md).
CCA_COMPARE_FIELDS = frozenset({
    "index", "repetition", "status", "bytes", "duration_s", "throughput_bps",
    "self_delay_s", "self_delay_median_s", "self_delay_p95_s", "min_rtt_s",
    "retrans_pct", "dupack_pct", "data_packets", "retrans_packets", "pure_acks", "dupacks",
    "sinr_db", "rsrp_dbm", "band", "cell_id", "handovers", "modem_samples",
})
CCA_BINS_FIELDS = frozenset({"bps", "index"})
STATUSES = ("ok", "failed", "uncaptured")
MEASUREMENTS = (
    Measurement(CCA_COMPARE, field_specs(
        sorted(CCA_COMPARE_FIELDS),
        integers=("index", "repetition", "bytes", "data_packets", "retrans_packets",
                  "pure_acks", "dupacks", "cell_id", "handovers", "modem_samples"),
        strings=("status", "band"))),
    Measurement(CCA_BINS, field_specs(sorted(CCA_BINS_FIELDS), integers=("index",))),
)


@dataclass(frozen=True)
class ModemSample:
    """The parts of one ``meta/modem.jsonl`` record the join uses (node clock)."""

    time_s: float
    interface: str
    sinr: float | None
    rsrp: float | None
    band: str | None
    cell_id: int | None
    handovers: int | None


def _opt_float(value: Any) -> float | None:
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def modem_samples(records: Sequence[Mapping[str, Any]]) -> list[ModemSample]:
    """The agent's modem records in time order; records without a readable time are
    left out (they cannot be placed against a transfer)."""
    out = []
    for r in records:
        try:
            when = datetime.fromisoformat(str(r["time"])).timestamp()
        except (KeyError, ValueError):
            continue
        cell, count = r.get("cell_id"), r.get("handovers")
        out.append(ModemSample(
            time_s=when, interface=str(r.get("interface") or ""),
            sinr=_opt_float(r.get("sinr")), rsrp=_opt_float(r.get("rsrp")),
            band=None if r.get("band") is None else str(r["band"]),
            cell_id=cell if isinstance(cell, int) and not isinstance(cell, bool) else None,
            handovers=count if isinstance(count, int) and not isinstance(count, bool) else None))
    return sorted(out, key=lambda s: s.time_s)


@dataclass(frozen=True)
class Radio:
    """The modem's state over one transfer."""

    sinr_db: float | None
    rsrp_dbm: float | None
    band: str | None
    cell_id: int | None
    handovers: int | None  # None: no sample on one side of the transfer
    samples: int


def handovers_between(samples: Sequence[ModemSample]) -> int | None:
    """Handovers across consecutive samples: the counter's increase when every sample
    has one, else the changes of serving cell; None with fewer than two samples."""
    if len(samples) < 2:
        return None
    counts = [s.handovers for s in samples if s.handovers is not None]
    if len(counts) == len(samples):
        return sum(max(0, b - a) for a, b in pairwise(counts))
    cells = [s.cell_id for s in samples if s.cell_id is not None]
    return sum(1 for a, b in pairwise(cells) if a != b)


def radio_during(samples: Sequence[ModemSample], start_s: float, end_s: float) -> Radio:
    """The modem's state over ``[start_s, end_s]`` from one interface's samples."""
    before = [s for s in samples if s.time_s < start_s]
    inside = [s for s in samples if start_s <= s.time_s <= end_s]
    after = [s for s in samples if s.time_s > end_s]
    window = ([before[-1]] if before else []) + inside + ([after[0]] if after else [])
    described = inside or ([before[-1]] if before else []) or ([after[0]] if after else [])
    sinrs = [s.sinr for s in described if s.sinr is not None]
    rsrps = [s.rsrp for s in described if s.rsrp is not None]
    first = described[0] if described else None
    return Radio(
        sinr_db=statistics.fmean(sinrs) if sinrs else None,
        rsrp_dbm=statistics.fmean(rsrps) if rsrps else None,
        band=first.band if first else None, cell_id=first.cell_id if first else None,
        handovers=handovers_between(window) if before and after else None,
        samples=len(described))


@dataclass(frozen=True)
class TransferRow:
    """One transfer's figures and its bins; ``time_ns`` is its start on the node's
    clock, and bin ``k`` is at ``time_ns + k * bin_ns``."""

    time_ns: int
    cca: str
    kind: str
    fields: Mapping[str, float | int | str | None]
    bins_bps: Sequence[float]
    bin_ns: int


def _captured(result: CcaCompareResult, flows: Sequence[FlowStats]) -> dict[int, FlowStats]:
    out: dict[int, FlowStats] = {}
    for f in sorted(flows, key=lambda f: f.start_ns):
        if f.connection.server.port == result.port:
            out.setdefault(f.connection.client.port, f)
    return out


def _figures(got: FlowStats) -> dict[str, float | int | str | None]:
    delay = got.above_min_delay
    return {
        "bytes": got.delivered_bytes, "duration_s": got.fct_s,
        "throughput_bps": got.delivered_bytes * 8 / got.fct_s if got.fct_s else None,
        "self_delay_s": delay.mean_s if delay else None,
        "self_delay_median_s": delay.median_s if delay else None,
        "self_delay_p95_s": delay.p95_s if delay else None,
        "min_rtt_s": got.min_rtt_s, "retrans_pct": got.retrans_pct,
        "dupack_pct": got.dupack_pct, "data_packets": got.data_packets,
        "retrans_packets": got.retrans_packets, "pure_acks": got.pure_acks,
        "dupacks": got.dupacks,
    }


def transfer_rows(result: CcaCompareResult, sender_flows: Sequence[FlowStats],
                  modem: Sequence[ModemSample]) -> list[TransferRow]:
    """Every transfer of ``result`` with its figures from the sender's capture and its
    radio from the modem samples of the result's interface."""
    by_port = _captured(result, sender_flows)
    own = [s for s in modem if s.interface == result.interface] or (
        list(modem) if len({s.interface for s in modem}) == 1 else [])
    rows = []
    for t in result.transfers:
        rows.append(_row(t, by_port.get(t.local_port) if t.error is None else None, own))
    return rows


def _row(t: Transfer, got: FlowStats | None, modem: Sequence[ModemSample]) -> TransferRow:
    radio = radio_during(modem, t.start_unix_s, t.end_unix_s)
    fields: dict[str, float | int | str | None] = {
        "index": t.index, "repetition": t.repetition,
        "status": "failed" if t.error is not None else "uncaptured" if got is None else "ok",
        "sinr_db": radio.sinr_db, "rsrp_dbm": radio.rsrp_dbm, "band": radio.band,
        "cell_id": radio.cell_id, "handovers": radio.handovers,
        "modem_samples": radio.samples,
    }
    bins: list[float] = []
    bin_ns = 100_000_000
    if got is not None:
        fields.update(_figures(got))
        bins = got.rates_bps(delivered=True)
        bin_ns = round(got.bin_s * 1e9)
    return TransferRow(time_ns=round(t.start_unix_s * 1e9), cca=t.cca, kind=t.kind,
                       fields=fields, bins_bps=bins, bin_ns=bin_ns)


def cca_compare_points(result: Mapping[str, Any], sender_flows: Sequence[FlowStats],
                       modem: Sequence[Mapping[str, Any]], ctx: RunContext) -> list[Point]:
    """A ``testbed.cca-compare`` v1 result, joined with the flows of the capture at the
    sender and the run's modem records (:func:`transfer_rows`), as one ``cca_compare``
    point per transfer and one ``cca_bins`` point per 100 ms bin of its throughput,
    tagged with ``direction``, ``cca`` and ``kind`` (bulk/download)."""
    parsed = cca_compare.parse_result(result)
    out = []
    for row in transfer_rows(parsed, sender_flows, modem_samples(modem)):
        tags = {"direction": parsed.direction, "cca": row.cca, "kind": row.kind}
        out.append(point(CCA_COMPARE, ctx, row.fields, row.time_ns, **tags))
        out.extend(point(CCA_BINS, ctx, {"bps": bps, "index": row.fields["index"]},
                         row.time_ns + k * row.bin_ns, **tags)
                   for k, bps in enumerate(row.bins_bps))
    return out


def read(result: Mapping[str, Any], inputs: RunInputs) -> list[Point]:
    """The study's reader: the result joined with the capture at the sender (the
    node's for uplink; the server's for downlink, which the experiment's manifest lets
    ingest read: ``ingest.sender_capture``) and the run's modem samples."""
    if result.get("direction") != "downlink":
        sender: Sequence[FlowStats] = inputs.flows
    else:
        if not inputs.has_server_capture:
            inputs.notes.append("cca-compare downlink: the bundle has no server capture "
                                "(the sender's side); its transfers are written as "
                                "uncaptured")
        sender = inputs.server_flows()
    return cca_compare_points(result, sender, inputs.modem, inputs.ctx)
