"""Figures of an ABw-TAT-ABw session, from the runs' result records.

The seeds interleave two available-bandwidth tools around a TCP transfer:
ABW1-TAT-ABW2, a 5 min pause, ABW2-TAT-ABW1 (order balanced), repeated 4 times. Each
TAT is paired with the run of each ABw tool next to it in time, and the study reports
the relative difference RD = |TAT - ABw| / TAT and the absolute difference, what the
estimate cost (traffic volume of ABw against TAT: the paper saw TAT move 8.5x to 14.7x
more bytes) and how long one estimate took (0.8-1.6 s mean in the paper).

Inputs are the records as stored: a TAT result (``testbed.tat`` v1, see
experiments/tat/tat_parse.py) and the ABw tool's JSON-lines records
(tools/abw/src/record.rs: ``type`` "estimate" with ``estimate_bps``, ``latency_s``,
``bytes_sent``, ``control_bytes``, ``start_unix_s``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class AbwRun:
    """One run of one ABw tool: its estimates (the tool repeats them) and their cost."""

    method: str
    start_s: float  # Unix time of the first estimate
    estimates_bps: tuple[float, ...]
    latencies_s: tuple[float, ...]
    bytes: int  # probe plus control bytes sent by the node

    @property
    def mean_bps(self) -> float:
        return statistics.fmean(self.estimates_bps)


@dataclass(frozen=True)
class TatRun:
    start_s: float
    mean_bps: float
    bins_bps: tuple[float, ...]
    bin_s: float
    bytes: int  # bytes the sender pushed (what the node's quota paid)


@dataclass(frozen=True)
class Pair:
    """One TAT against the nearest run of one ABw tool."""

    method: str
    tat: TatRun
    abw: AbwRun
    abs_diff_bps: float
    rd: float  # |TAT - ABw| / TAT


@dataclass(frozen=True)
class MethodFigures:
    method: str
    pairs: tuple[Pair, ...]
    abw_mean_bps: float
    rd_mean: float
    abs_diff_mean_bps: float
    latency_mean_s: float
    latency_sd_s: float  # sample standard deviation (0 with one estimate)
    abw_bytes: int
    tat_bytes: int
    volume_ratio: float  # TAT bytes / ABw bytes over the paired runs


@dataclass(frozen=True)
class SessionFigures:
    tat_mean_bps: float
    tat_runs: tuple[TatRun, ...]
    methods: dict[str, MethodFigures]


def abw_run(records: Iterable[Mapping[str, Any]]) -> AbwRun:
    """An ABw run from the tool's records; error records are left out of the figures."""
    estimates = [r for r in records if r.get("type") == "estimate"]
    if not estimates:
        raise ValueError("the ABw run has no estimate record (every repetition failed?)")
    methods = {str(r["method"]) for r in estimates}
    if len(methods) != 1:
        raise ValueError(f"one ABw run is one tool, these records mix {sorted(methods)}")
    return AbwRun(
        method=methods.pop(),
        start_s=min(float(r["start_unix_s"]) for r in estimates),
        estimates_bps=tuple(float(r["estimate_bps"]) for r in estimates),
        latencies_s=tuple(float(r["latency_s"]) for r in estimates),
        bytes=sum(int(r.get("bytes_sent", 0)) + int(r.get("control_bytes", 0))
                  for r in estimates),
    )


def tat_run(result: Mapping[str, Any]) -> TatRun:
    """A TAT run from its ``testbed.tat`` result."""
    if result.get("format") != "testbed.tat":
        raise ValueError(f"not a TAT result (format {result.get('format')!r})")
    return TatRun(
        start_s=datetime.fromisoformat(str(result["start"])).timestamp(),
        mean_bps=float(result["mean_bps"]),
        bins_bps=tuple(float(b["bits_per_second"]) for b in result["bins"]),
        bin_s=float(result["bin_s"]),
        bytes=int(result.get("sender_bytes") or result["bytes"]),
    )


def _nearest(tat: TatRun, runs: Sequence[AbwRun]) -> AbwRun:
    return min(runs, key=lambda r: abs(r.start_s - tat.start_s))


def session_figures(*, tat: Sequence[TatRun], abw: Sequence[AbwRun]) -> SessionFigures:
    """Pair every TAT with the nearest run of each ABw tool and summarise per tool."""
    if not tat:
        raise ValueError("a session needs at least one TAT run")
    by_method: dict[str, list[AbwRun]] = {}
    for run in abw:
        by_method.setdefault(run.method, []).append(run)
    methods: dict[str, MethodFigures] = {}
    for method, runs in sorted(by_method.items()):
        pairs = []
        for t in tat:
            a = _nearest(t, runs)
            diff = abs(t.mean_bps - a.mean_bps)
            pairs.append(Pair(method=method, tat=t, abw=a, abs_diff_bps=diff,
                              rd=diff / t.mean_bps if t.mean_bps > 0 else float("inf")))
        used = list({id(p.abw): p.abw for p in pairs}.values())
        latencies = [x for r in used for x in r.latencies_s]
        abw_bytes = sum(r.bytes for r in used)
        tat_bytes = sum(t.bytes for t in tat)
        methods[method] = MethodFigures(
            method=method,
            pairs=tuple(pairs),
            abw_mean_bps=statistics.fmean(r.mean_bps for r in used),
            rd_mean=statistics.fmean(p.rd for p in pairs),
            abs_diff_mean_bps=statistics.fmean(p.abs_diff_bps for p in pairs),
            latency_mean_s=statistics.fmean(latencies),
            latency_sd_s=statistics.stdev(latencies) if len(latencies) > 1 else 0.0,
            abw_bytes=abw_bytes,
            tat_bytes=tat_bytes,
            volume_ratio=tat_bytes / abw_bytes if abw_bytes else float("inf"),
        )
    return SessionFigures(
        tat_mean_bps=statistics.fmean(t.mean_bps for t in tat),
        tat_runs=tuple(tat),
        methods=methods,
    )
