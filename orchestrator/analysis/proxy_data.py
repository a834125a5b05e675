"""From a proxy-mode campaign's time-series points to each SIM's proxy history (pure).

The planner (whether a SIM's next window needs a TAT) and the ``abw-proxy`` page
(predicted against measured) read the same points and build the same histories here:

- every TAT transfer of an ABw-TAT-ABw run, with the ABw step just before it and the
  one just after it as its signals (:class:`~orchestrator.analysis.proxy.Observation`);
- every ABw-only run (proxy mode's cheap session), its ABw steps in consecutive pairs,
  each pair a point where the proxy stands in for a TAT;
- what each run cost in bytes (the tools' own counts), and whether it ran a TAT.

Radio signals (RSRP, SINR, band) are the run's modem samples' means. The previous
TAT is left out here: within a TAT session it is minutes old, at a cheap session hours
old, so the model would learn a lag it never sees when it predicts.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from orchestrator.analysis.proxy import Observation, Signals


@dataclass(frozen=True)
class SimId:
    node: str
    operator: str  # MCC-MNC
    operator_name: str = ""

    def label(self) -> str:
        name = f"{self.operator_name} ({self.operator})" if self.operator_name else self.operator
        return f"{self.node} {name}"


@dataclass(frozen=True)
class TatPoint:
    time_ns: int
    sim: SimId
    run: str
    mean_bps: float
    bytes: int


@dataclass(frozen=True)
class AbwPoint:
    time_ns: int
    sim: SimId
    run: str
    step: int  # the session step that took it
    estimate_bps: float
    bytes: int
    rtt_s: float | None = None


@dataclass(frozen=True)
class ModemPoint:
    sim: SimId
    run: str
    rsrp_dbm: float | None
    sinr_db: float | None
    band: str | None = None


@dataclass(frozen=True)
class Cheap:
    """Where the proxy stood in for a TAT: a pair of ABw steps of a cheap session."""

    time_s: float
    run: str
    signals: Signals


@dataclass(frozen=True)
class RunCost:
    run: str
    time_s: float
    tat: bool  # the run measured TAT (a full session)
    bytes: int


@dataclass
class SimHistory:
    sim: SimId
    observations: list[Observation] = field(default_factory=list)
    cheap: list[Cheap] = field(default_factory=list)
    runs: list[RunCost] = field(default_factory=list)


def _mean(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.fmean(got) if got else None


def histories(tats: Sequence[TatPoint], abws: Sequence[AbwPoint],
              modems: Sequence[ModemPoint] = ()) -> dict[SimId, SimHistory]:
    """Each SIM's history, everything in time order (``time_s``: the points' time,
    which is campaign time: ingest writes campaign runs at campaign time)."""
    by_run_tat: dict[str, list[TatPoint]] = defaultdict(list)
    by_run_abw: dict[str, dict[int, list[AbwPoint]]] = defaultdict(lambda: defaultdict(list))
    radio: dict[str, list[ModemPoint]] = defaultdict(list)
    sims: dict[str, SimId] = {}
    for t in tats:
        by_run_tat[t.run].append(t)
        sims[t.run] = t.sim
    for a in abws:
        by_run_abw[a.run][a.step].append(a)
        sims[a.run] = a.sim
    for m in modems:
        radio[m.run].append(m)
    out: dict[SimId, SimHistory] = {}
    for run, sim in sims.items():
        h = out.setdefault(sim, SimHistory(sim))
        steps = sorted(by_run_abw.get(run, {}).values(), key=lambda s: min(a.time_ns for a in s))
        # A run's modem file samples every modem of the node: this SIM's only.
        modem = [m for m in radio.get(run, []) if m.sim.operator == sim.operator]
        bands = [m.band for m in modem if m.band]

        def signals(chosen: list[list[AbwPoint]], modem: list[ModemPoint] = modem,
                    bands: list[str] = bands) -> Signals:
            points = [a for s in chosen for a in s]
            return Signals(abw_bps=tuple(a.estimate_bps for a in points),
                           rtt_s=_mean(a.rtt_s for a in points),
                           rsrp_dbm=_mean(m.rsrp_dbm for m in modem),
                           sinr_db=_mean(m.sinr_db for m in modem),
                           band=bands[-1] if bands else None)

        run_tats = sorted(by_run_tat.get(run, []), key=lambda t: t.time_ns)
        for t in run_tats:
            before = [s for s in steps if min(a.time_ns for a in s) < t.time_ns]
            after = [s for s in steps if min(a.time_ns for a in s) > t.time_ns]
            around = before[-1:] + after[:1]
            if around:
                h.observations.append(Observation(t.time_ns / 1e9, signals(around), t.mean_bps))
        if not run_tats:
            for i in range(0, len(steps) - 1, 2):
                pair = steps[i:i + 2]
                h.cheap.append(Cheap(min(a.time_ns for a in pair[0]) / 1e9, run,
                                     signals(pair)))
        start = min([t.time_ns for t in run_tats] + [a.time_ns for s in steps for a in s])
        h.runs.append(RunCost(run, start / 1e9, bool(run_tats),
                              sum(t.bytes for t in run_tats)
                              + sum(a.bytes for s in steps for a in s)))
    for h in out.values():
        h.observations.sort(key=lambda o: o.time_s)
        h.cheap.sort(key=lambda c: c.time_s)
        h.runs.sort(key=lambda r: r.time_s)
    return out
