"""ABw-TAT pairs from the time series' rows, and their per-operator figures (pure).

The rows are what the ABw vs TAT page reads from the store (one per TAT transfer, one
per ABw estimate) and what a dataset release publishes as tables: the page and anyone
holding a release recompute the same pairs, RD and volume ratio with the same code.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from testbed_kit.session import AbwRun, TatRun, session_figures


@dataclass(frozen=True)
class Where:
    """The tags that place a measurement: which node, operator and country."""

    node: str
    country: str
    operator: str  # MCC-MNC, "" when the run did not know it
    operator_name: str

    @property
    def operator_label(self) -> str:
        """``Telia SE (240-01)``, or whichever of the two is known."""
        if self.operator_name and self.operator:
            return f"{self.operator_name} ({self.operator})"
        return self.operator_name or self.operator or "unknown operator"

    @property
    def operator_key(self) -> str:
        return self.operator or self.operator_name


@dataclass(frozen=True)
class TatSummaryRow:
    """One TAT transfer (a ``tat_summary`` point)."""

    time_ns: int
    where: Where
    campaign: str
    run: str
    session: str
    direction: str
    mean_bps: float
    sender_bytes: int  # what the node's quota paid; the receiver's count when unknown


@dataclass(frozen=True)
class AbwRow:
    """One ABw estimate (an ``abw`` point)."""

    time_ns: int
    where: Where
    campaign: str
    run: str
    session: str
    direction: str
    method: str
    estimate_bps: float
    latency_s: float
    bytes: int
    #: The session step that took it (ABW1 and ABW2 of one tool are separate runs of
    #: it); None for a plain ABw run.
    step: int | None = None


@dataclass(frozen=True)
class PairRow:
    """One TAT paired with the nearest run of one ABw tool in its session."""

    where: Where
    method: str
    tat_bps: float
    abw_bps: float
    rd: float
    abs_diff_bps: float
    latencies_s: tuple[float, ...]
    tat_bytes: int
    abw_bytes: int


def pair_sessions(tat_rows: Sequence[TatSummaryRow],
                  abw_rows: Sequence[AbwRow]) -> tuple[list[PairRow], list[str]]:
    """Pairs over every session that has both TAT and ABw runs, and notes on the rest.

    A session is a (node, operator, direction, session tag); within it each TAT is
    paired with the nearest run of each ABw tool (:func:`testbed_kit.session.session_figures`).
    An ABw run is one run's estimates of one tool in one session step: an ABw-TAT-ABw
    run measures with the same tool before and after each TAT.
    """
    Key = tuple[str, str, str, str]
    tats: dict[Key, list[TatRun]] = defaultdict(list)
    places: dict[Key, Where] = {}
    abw: dict[Key, dict[tuple[str, str, int], list[AbwRow]]] = defaultdict(
        lambda: defaultdict(list))
    untagged = 0
    for t in tat_rows:
        if not t.session:
            untagged += 1
            continue
        key = (t.where.node, t.where.operator_key, t.direction, t.session)
        places[key] = t.where
        tats[key].append(TatRun(start_s=t.time_ns / 1e9, mean_bps=t.mean_bps, bins_bps=(),
                                bin_s=0.1, bytes=t.sender_bytes))
    for a in abw_rows:
        if a.session:
            abw[(a.where.node, a.where.operator_key, a.direction, a.session)][
                (a.run, a.method, -1 if a.step is None else a.step)].append(a)
    pairs: list[PairRow] = []
    lonely = 0
    for key, tat_runs in tats.items():
        runs = [AbwRun(method=method, start_s=min(r.time_ns for r in rs) / 1e9,
                       estimates_bps=tuple(r.estimate_bps for r in rs),
                       latencies_s=tuple(r.latency_s for r in rs),
                       bytes=sum(r.bytes for r in rs))
                for (_run, method, _step), rs in sorted(abw.get(key, {}).items())]
        if not runs:
            lonely += 1
            continue
        figures = session_figures(tat=tat_runs, abw=runs)
        for fig in figures.methods.values():
            for p in fig.pairs:
                pairs.append(PairRow(where=places[key], method=p.method,
                                     tat_bps=p.tat.mean_bps, abw_bps=p.abw.mean_bps, rd=p.rd,
                                     abs_diff_bps=p.abs_diff_bps,
                                     latencies_s=p.abw.latencies_s, tat_bytes=p.tat.bytes,
                                     abw_bytes=p.abw.bytes))
    notes = []
    if untagged:
        notes.append(f"{untagged} TAT transfer(s) carry no session tag and are not paired.")
    if lonely:
        notes.append(f"{lonely} session(s) have TAT but no ABw estimate and are not paired.")
    return pairs, notes


@dataclass(frozen=True)
class OperatorFigures:
    """The ABw vs TAT page's summary row of one country, operator and ABw tool."""

    country: str  # "??" when unknown
    operator: str  # Where.operator_label
    method: str
    pairs: int
    mean_tat_bps: float
    mean_abw_bps: float
    mean_rd: float
    median_rd: float
    mean_abs_diff_bps: float
    latency_mean_s: float
    latency_sd_s: float
    #: Bytes TAT sent per byte the ABw tool sent over the paired runs; inf without ABw bytes.
    volume_ratio: float


def operator_figures(pairs: Sequence[PairRow]) -> list[OperatorFigures]:
    """Per country, operator and ABw tool, sorted so: the figures of the page's table."""
    groups: dict[tuple[str, str], list[PairRow]] = defaultdict(list)
    for p in pairs:
        groups[(p.where.country or "??", p.where.operator_label)].append(p)
    out = []
    for (country, label), ps in sorted(groups.items()):
        for m in sorted({p.method for p in ps}):
            mp = [p for p in ps if p.method == m]
            lat = [x for p in mp for x in p.latencies_s]
            abw_bytes = sum(p.abw_bytes for p in mp)
            out.append(OperatorFigures(
                country=country, operator=label, method=m, pairs=len(mp),
                mean_tat_bps=statistics.fmean(p.tat_bps for p in mp),
                mean_abw_bps=statistics.fmean(p.abw_bps for p in mp),
                mean_rd=statistics.fmean(p.rd for p in mp),
                median_rd=statistics.median(p.rd for p in mp),
                mean_abs_diff_bps=statistics.fmean(p.abs_diff_bps for p in mp),
                latency_mean_s=statistics.fmean(lat) if lat else math.nan,
                latency_sd_s=statistics.stdev(lat) if len(lat) > 1 else 0.0,
                volume_ratio=(sum(p.tat_bytes for p in mp) / abw_bytes if abw_bytes
                              else math.inf)))
    return out
