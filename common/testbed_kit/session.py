"""Figures of an ABw-TAT-ABw session, from the runs' result records.

The seeds interleave two available-bandwidth tools around a TCP transfer:
ABW1-TAT-ABW2, a 5 min pause, ABW2-TAT-ABW1 (order balanced), repeated 4 times. Each
TAT is paired with the runs of each ABw tool around it (the one just before and the one
just after, no further than the neighbouring TATs: with the same tool as ABW1 and ABW2
that is the mean of both, with two tools each tool's neighbour), and the study reports
the relative difference RD = |TAT - ABw| / TAT and the absolute difference, what the
estimate cost (traffic volume of ABw against TAT: the paper saw TAT move 8.5x to 14.7x
more bytes) and how long one estimate took (0.8-1.6 s mean in the paper).

Part of the experiment kit: the abw-tat experiment writes its session summary with
it, and the orchestrator's ingest and pages compute the same figures from the archived
records (orchestrator/analysis/abwtat.py). Pure, standard library only.

Inputs are the records as stored: a TAT result (``testbed.tat`` v1, see
:mod:`testbed_kit.tat_result`) and the ABw tool's JSON-lines records
(tools/abw/src/record.rs: ``type`` "estimate" with ``estimate_bps``, ``latency_s``,
``bytes_sent``, ``control_bytes``, ``start_unix_s``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from testbed_kit import tat_result


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
    """One TAT against the runs of one ABw tool around it (merged into one: their
    estimates and cost together, starting at the first)."""

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
    if result.get("format") != tat_result.FORMAT:
        raise ValueError(f"not a TAT result (format {result.get('format')!r})")
    return TatRun(
        start_s=datetime.fromisoformat(str(result["start"])).timestamp(),
        mean_bps=float(result["mean_bps"]),
        bins_bps=tuple(float(b["bits_per_second"]) for b in result["bins"]),
        bin_s=float(result["bin_s"]),
        bytes=int(result.get("sender_bytes") or result["bytes"]),
    )


def _around(tat: TatRun, runs: Sequence[AbwRun], lo: float, hi: float) -> list[AbwRun]:
    """The runs of one tool next to ``tat``: the last to start before it (after ``lo``,
    the previous TAT's start) and the first after it (before ``hi``, the next TAT's);
    the nearest run of all when neither side has one."""
    before = [r for r in runs if lo < r.start_s <= tat.start_s]
    after = [r for r in runs if tat.start_s < r.start_s < hi]
    out = ([max(before, key=lambda r: r.start_s)] if before else []) + \
        ([min(after, key=lambda r: r.start_s)] if after else [])
    return out or [min(runs, key=lambda r: abs(r.start_s - tat.start_s))]


def _merged(runs: Sequence[AbwRun]) -> AbwRun:
    if len(runs) == 1:
        return runs[0]
    return AbwRun(method=runs[0].method, start_s=min(r.start_s for r in runs),
                  estimates_bps=tuple(e for r in runs for e in r.estimates_bps),
                  latencies_s=tuple(x for r in runs for x in r.latencies_s),
                  bytes=sum(r.bytes for r in runs))


def session_figures(*, tat: Sequence[TatRun], abw: Sequence[AbwRun]) -> SessionFigures:
    """Pair every TAT with the runs of each ABw tool around it and summarise per tool."""
    if not tat:
        raise ValueError("a session needs at least one TAT run")
    by_method: dict[str, list[AbwRun]] = {}
    for run in abw:
        by_method.setdefault(run.method, []).append(run)
    starts = sorted(t.start_s for t in tat)
    methods: dict[str, MethodFigures] = {}
    for method, runs in sorted(by_method.items()):
        pairs = []
        used_by_id: dict[int, AbwRun] = {}
        for t in tat:
            i = starts.index(t.start_s)
            lo = starts[i - 1] if i > 0 else float("-inf")
            hi = starts[i + 1] if i + 1 < len(starts) else float("inf")
            around = _around(t, runs, lo, hi)
            used_by_id.update((id(r), r) for r in around)
            a = _merged(around)
            diff = abs(t.mean_bps - a.mean_bps)
            pairs.append(Pair(method=method, tat=t, abw=a, abs_diff_bps=diff,
                              rd=diff / t.mean_bps if t.mean_bps > 0 else float("inf")))
        used = list(used_by_id.values())
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
