"""The ``testbed.abw-tools`` result: which available-bandwidth method and probe size to
trust behind a home gateway (after Goga & Teixeira's comparison), its plan, its parser
and its figures (pure: no I/O, stdlib only).

Goga and Teixeira compared ABw tools on residential access links and found that tools
probing with small packets (pathload's 200 bytes) underestimate badly when the gateway
caps the packets it forwards per second: a stream of 200-byte packets at the link's
capacity needs five to seven times the packet rate of 1500-byte ones. They also
counted what each estimate cost (spruce: ~288 KB of probes) and took.

A session runs every *cell* (an ABw method at a probe size) in turn between TCP
achievable-throughput (TAT) transfers on the same link: per repetition a TAT, then each
cell once, the cells' order reversed every other repetition (so over an even count
each cell has the same mean position after the TAT), and one closing TAT. Each
estimate is paired with the TATs on either side of its block (their mean): the
reference the method is judged against, measured on the same link within seconds.

Per estimate: the relative error ``(ABw - TAT) / TAT`` (negative: underestimate), the
latency (the tool's own), the probe bytes (IP bytes of the probe packets) and the
control bytes. Per cell, :func:`summarise`: the median and spread of the error, the
share of estimates within :data:`TOLERANCE` of TAT, the mean latency, the mean probe
bytes per estimate, and the overhead: the probes' mean rate while the tool ran, as a
share of TAT (what the measurement takes from the link while it measures).

Part of the experiment kit: the experiment writes its summary with it, and the
orchestrator's ingest and page compute the same figures from the archived result.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FORMAT = "testbed.abw-tools"
VERSION = 1
METHODS = ("yaz", "pathload", "spruce")
#: The reference's small probes (pathload's 200 bytes) and the estimator's large default.
SMALL_BYTES, LARGE_BYTES = 200, 1400
DIRECTIONS = ("uplink", "downlink")
#: An estimate within this share of TAT counts as agreeing with it.
TOLERANCE = 0.15


@dataclass(frozen=True)
class Cell:
    """One ABw method at one probe size (IP bytes of a probe packet)."""

    method: str
    size: int

    @property
    def label(self) -> str:
        return f"{self.method} {self.size} B"


@dataclass(frozen=True)
class Step:
    """One step of a session's plan: a TAT transfer, or one estimate of one cell."""

    index: int
    repetition: int
    kind: str  # "tat" or "abw"
    cell: Cell | None = None


def cells(methods: Sequence[str] = METHODS,
          sizes: Sequence[int] = (SMALL_BYTES, LARGE_BYTES)) -> list[Cell]:
    """Every method at every size, method-major (the order of a forward repetition)."""
    return [Cell(m, s) for m in methods for s in sizes]


def plan(repetitions: int, session_cells: Sequence[Cell]) -> list[Step]:
    """The session's steps: per repetition a TAT, then every cell once (forward in even
    repetitions, reversed in odd ones), and a closing TAT; every estimate thus has a
    TAT on each side."""
    if repetitions < 1:
        raise ValueError(f"a session needs at least one repetition, not {repetitions}")
    if not session_cells:
        raise ValueError("a session needs at least one method and one probe size")
    out: list[Step] = []
    for rep in range(repetitions):
        out.append(Step(len(out), rep, "tat"))
        order = list(session_cells) if rep % 2 == 0 else list(reversed(session_cells))
        first = len(out)
        out.extend(Step(first + i, rep, "abw", c) for i, c in enumerate(order))
    out.append(Step(len(out), repetitions - 1, "tat"))
    return out


@dataclass(frozen=True)
class Estimate:
    """One estimate of one cell, as the session recorded it (``step``: its plan index)."""

    step: int
    repetition: int
    cell: Cell
    start_unix_s: float
    estimate_bps: float
    latency_s: float
    probe_bytes: int  # IP bytes of the probe packets (both directions of --reverse: sent)
    probe_packets: int
    control_bytes: int


@dataclass(frozen=True)
class Tat:
    step: int
    start_unix_s: float
    mean_bps: float
    bytes: int


@dataclass(frozen=True)
class AbwToolsResult:
    direction: str
    interface: str
    estimates: tuple[Estimate, ...]
    tats: tuple[Tat, ...]


class AbwToolsOutputError(ValueError):
    """A ``testbed.abw-tools`` document that cannot be read."""


def estimate_record(step: int, repetition: int, cell: Cell,
                    record: Mapping[str, Any]) -> dict[str, Any]:
    """The result's entry for one estimate from the estimator's JSON line
    (tools/abw: ``type`` "estimate")."""
    return {"step": step, "repetition": repetition, "method": cell.method, "size": cell.size,
            "start_unix_s": float(record["start_unix_s"]),
            "estimate_bps": float(record["estimate_bps"]),
            "latency_s": float(record["latency_s"]),
            "probe_bytes": int(record.get("bytes_sent", 0)),
            "probe_packets": int(record.get("packets_sent", 0)),
            "control_bytes": int(record.get("control_bytes", 0))}


def parse_result(doc: Mapping[str, Any]) -> AbwToolsResult:
    """The estimates and TATs of a ``testbed.abw-tools`` v1 document."""
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise AbwToolsOutputError(f"not a {FORMAT} v{VERSION} result "
                                  f"({doc.get('format')!r} v{doc.get('version')!r})")
    direction = doc.get("direction")
    if direction not in DIRECTIONS:
        raise AbwToolsOutputError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    try:
        estimates = tuple(Estimate(
            step=int(e["step"]), repetition=int(e["repetition"]),
            cell=Cell(str(e["method"]), int(e["size"])),
            start_unix_s=float(e["start_unix_s"]), estimate_bps=float(e["estimate_bps"]),
            latency_s=float(e["latency_s"]), probe_bytes=int(e["probe_bytes"]),
            probe_packets=int(e["probe_packets"]), control_bytes=int(e["control_bytes"]))
            for e in doc.get("estimates") or ())
        tats = tuple(Tat(step=int(t["step"]), start_unix_s=float(t["start_unix_s"]),
                         mean_bps=float(t["mean_bps"]), bytes=int(t["bytes"]))
                     for t in doc.get("tats") or ())
    except (KeyError, TypeError, ValueError) as e:
        raise AbwToolsOutputError(f"{FORMAT}: bad estimate or TAT entry: {e!r}") from e
    return AbwToolsResult(direction=str(direction), interface=str(doc.get("interface") or ""),
                          estimates=estimates, tats=tats)


@dataclass(frozen=True)
class Paired:
    """One estimate against the TAT around it."""

    estimate: Estimate
    tat_bps: float
    tats: int  # how many TATs the reference averages (2, or 1 at a session's edge)

    @property
    def error(self) -> float:
        """Relative error (ABw - TAT) / TAT: negative when the method underestimates."""
        return (self.estimate.estimate_bps - self.tat_bps) / self.tat_bps

    @property
    def overhead(self) -> float | None:
        """The probes' mean rate over the estimate's latency, as a share of TAT."""
        e = self.estimate
        if e.latency_s <= 0:
            return None
        return e.probe_bytes * 8 / e.latency_s / self.tat_bps


def pair(result: AbwToolsResult) -> list[Paired]:
    """Each estimate with the mean of the nearest TAT before it and the nearest after
    it in the session (by step); an estimate without any usable TAT is left out."""
    tats = sorted((t for t in result.tats if t.mean_bps > 0), key=lambda t: t.step)
    out = []
    for e in result.estimates:
        before = [t for t in tats if t.step < e.step]
        after = [t for t in tats if t.step > e.step]
        around = ([before[-1]] if before else []) + ([after[0]] if after else [])
        if around:
            out.append(Paired(e, statistics.fmean(t.mean_bps for t in around), len(around)))
    return out


@dataclass(frozen=True)
class CellFigures:
    """One cell's figures over its paired estimates."""

    cell: Cell
    estimates: int
    error_median: float
    error_q1: float
    error_q3: float
    abs_error_median: float
    within: int  # estimates within TOLERANCE of their TAT
    estimate_median_bps: float
    tat_mean_bps: float
    latency_mean_s: float
    probe_bytes_mean: float
    control_bytes_mean: float
    overhead_mean: float | None  # probe rate while measuring / TAT

    def as_dict(self) -> dict[str, Any]:
        return {"method": self.cell.method, "size": self.cell.size,
                "estimates": self.estimates, "error_median": self.error_median,
                "error_q1": self.error_q1, "error_q3": self.error_q3,
                "abs_error_median": self.abs_error_median, "within": self.within,
                "estimate_median_bps": self.estimate_median_bps,
                "tat_mean_bps": self.tat_mean_bps, "latency_mean_s": self.latency_mean_s,
                "probe_bytes_mean": self.probe_bytes_mean,
                "control_bytes_mean": self.control_bytes_mean,
                "overhead_mean": self.overhead_mean}


def quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    """(Q1, median, Q3), inclusive method; one value is all three."""
    if not xs:
        raise ValueError("no values")
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def cell_figures(cell: Cell, paired: Sequence[Paired]) -> CellFigures:
    """The figures of one cell over its ``paired`` estimates (at least one)."""
    if not paired:
        raise ValueError(f"{cell.label}: no estimate")
    errors = [p.error for p in paired]
    q1, med, q3 = quartiles(errors)
    overheads = [o for p in paired if (o := p.overhead) is not None]
    return CellFigures(
        cell=cell, estimates=len(paired), error_median=med, error_q1=q1, error_q3=q3,
        abs_error_median=statistics.median(abs(e) for e in errors),
        within=sum(1 for e in errors if abs(e) <= TOLERANCE),
        estimate_median_bps=statistics.median(p.estimate.estimate_bps for p in paired),
        tat_mean_bps=statistics.fmean(p.tat_bps for p in paired),
        latency_mean_s=statistics.fmean(p.estimate.latency_s for p in paired),
        probe_bytes_mean=statistics.fmean(p.estimate.probe_bytes for p in paired),
        control_bytes_mean=statistics.fmean(p.estimate.control_bytes for p in paired),
        overhead_mean=statistics.fmean(overheads) if overheads else None)


def summarise(paired: Sequence[Paired]) -> list[CellFigures]:
    """Every cell's figures, by method (in :data:`METHODS`' order, others after) and
    size."""
    by_cell: dict[Cell, list[Paired]] = {}
    for p in paired:
        by_cell.setdefault(p.estimate.cell, []).append(p)
    rank = {m: i for i, m in enumerate(METHODS)}
    order = sorted(by_cell, key=lambda c: (rank.get(c.method, len(rank)), c.method, c.size))
    return [cell_figures(c, by_cell[c]) for c in order]
