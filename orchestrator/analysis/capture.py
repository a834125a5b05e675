"""A capture's per-flow figures from either path: the reference or the compiled tool.

The reference is :func:`reference_flows`: :func:`~orchestrator.analysis.pcap.read_capture`
then :func:`~orchestrator.analysis.flows.analyse_capture`, in pure Python, on bytes in
memory. At fleet rate (issue 20: ~120k packets/s of captures) it is too slow and holds
the whole capture, so ingest runs the compiled twin, ``testbed-flows`` (tools/flows),
which streams the file twice and prints one JSON document; :func:`flows_from_document`
turns that document into the same :class:`FlowStats`. The tool gives times as integer
nanoseconds and this module divides them, so every float is the reference's to the bit;
tests/unit/test_analysis_native.py checks both paths agree on every recorded capture.
Running the tool is I/O and lives in :mod:`orchestrator.services.flowtool`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.analysis.flows import (
    DEFAULT_BIN_S,
    MAX_CAPTURE_BINS,
    MAX_CONNECTIONS,
    MAX_FLOW_BINS,
    Connection,
    DelayStats,
    Endpoint,
    FlowStats,
    analyse_bounded,
)
from orchestrator.analysis.pcap import CaptureError, read_capture


@dataclass(frozen=True)
class CaptureFlows:
    """A capture's connections (most payload first) and, when reading stopped at
    damage, where and why (the flows are then those of the packets before it); ``notes``
    say what the bounds of :mod:`~orchestrator.analysis.flows` left out."""

    flows: list[FlowStats]
    damage: CaptureError | None
    frames: int
    undecoded: int
    notes: list[str] = field(default_factory=list)


def bound_flags() -> list[str]:
    """The bounds as ``testbed-flows`` flags: defined once, here on the Python side."""
    return ["--max-flow-bins", str(MAX_FLOW_BINS), "--max-capture-bins",
            str(MAX_CAPTURE_BINS), "--max-connections", str(MAX_CONNECTIONS)]


def bin_ns(bin_s: float) -> int:
    """The bin width in nanoseconds, rounded as :func:`analyse_flow` rounds it."""
    if bin_s <= 0:
        raise ValueError("bin_s must be positive")
    return round(bin_s * 1e9)


def reference_flows(data: bytes, *, bin_s: float = DEFAULT_BIN_S) -> CaptureFlows:
    """The pure-Python analysis of a capture held in memory, read leniently."""
    capture = read_capture(data, strict=False)
    flows, notes = analyse_bounded(capture.packets, bin_s=bin_s)
    return CaptureFlows(flows=flows, damage=capture.damage, frames=capture.frames,
                        undecoded=capture.undecoded, notes=notes)


def _endpoint(value: Sequence[Any]) -> Endpoint:
    addr, port = value
    return Endpoint(bytes.fromhex(str(addr)), int(port))


def _seconds(ns: int | None) -> float | None:
    return None if ns is None else int(ns) / 1e9


def _delay(delay: Mapping[str, Any] | None) -> DelayStats | None:
    return None if delay is None else DelayStats(
        mean_s=float(delay["mean_s"]), median_s=float(delay["median_s"]),
        p95_s=float(delay["p95_s"]), samples=int(delay["samples"]))


def _flow(f: Mapping[str, Any], bin_s: float) -> FlowStats:
    return FlowStats(
        connection=Connection(_endpoint(f["client"]), _endpoint(f["server"])),
        data_from_client=bool(f["data_from_client"]),
        start_ns=int(f["start_ns"]),
        rtt_3whs_s=_seconds(f["rtt_3whs_ns"]),
        payload_bytes=int(f["payload_bytes"]),
        delivered_bytes=int(f["delivered_bytes"]),
        data_packets=int(f["data_packets"]),
        retrans_packets=int(f["retrans_packets"]),
        retrans_bytes=int(f["retrans_bytes"]),
        pure_acks=int(f["pure_acks"]),
        dupacks=int(f["dupacks"]),
        self_delay=_delay(f["self_delay"]),
        fct_s=_seconds(f["fct_ns"]),
        bin_s=bin_s,
        bins_t0_ns=int(f["bins_t0_ns"]),
        arrival_bins=[int(b) for b in f["arrival_bins"]],
        delivered_bins=[int(b) for b in f["delivered_bins"]],
        unbinned_packets=int(f["unbinned_packets"]),
        syn_fin_retrans=int(f["syn_fin_retrans"]),
        min_rtt_s=_seconds(f["min_rtt_ns"]),
        above_min_delay=_delay(f["above_min_delay"]),
    )


def flows_from_document(doc: Mapping[str, Any], *, bin_s: float = DEFAULT_BIN_S) -> CaptureFlows:
    """The tool's JSON document as :class:`CaptureFlows`; a file that is no capture at
    all raises :class:`CaptureError`, as :func:`read_capture` does."""
    if "error" in doc:
        raise CaptureError(str(doc["error"]), offset=int(doc.get("offset", 0)),
                           packets_read=int(doc.get("packets_read", 0)))
    damage = doc.get("damage")
    return CaptureFlows(
        flows=[_flow(f, bin_s) for f in doc["flows"]],
        damage=None if damage is None else CaptureError(
            str(damage["message"]), offset=int(damage["offset"]),
            packets_read=int(damage["packets_read"])),
        frames=int(doc["frames"]),
        undecoded=int(doc["undecoded"]),
        notes=[str(n) for n in doc["notes"]],
    )
