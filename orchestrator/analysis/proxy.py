"""The calibrated TAT proxy (``abw-proxy``): predict a SIM's TAT from cheap signals,
with a 90 % prediction interval, and say when a real TAT is needed (pure).

Why: on a metered SIM an ABw estimate costs a tenth or less of a TAT's bytes, but on a
fluctuating link ABw and TAT differ by 16-30 % (issue 16), so an ABw figure alone says
nothing of how far to trust it as a TAT. This module turns the rare TATs a SIM did run
into a per-SIM model and an interval that covers the next TAT 90 % of the time.

The model, per SIM: a ridge regression of ``log(TAT)`` on the session's cheap signals,
:class:`Signals` -- the log of the ABw estimates' mean (before and after the TAT),
their relative range, and, when every training row has them, RTT, RSRP, SINR and the
log of the previous TAT. Working in logs makes the error relative (a 20 % miss weighs
the same at 2 and at 20 Mbit/s) and keeps predictions positive. The ridge penalty
(:data:`RIDGE`, on standardised features, never on the intercept) keeps a handful of
TATs from fitting noise with six coefficients; with only the ABw column it is the
classic "TAT is a SIM-specific multiple of ABw" model.

The interval is conformal (jackknife, Barber et al. 2021, "Predictive inference with
the jackknife+", Ann. Statist. 49(1)): each training TAT is predicted by the model
fitted without it (leave-one-out, exact for ridge through the hat matrix), and the
interval is the prediction plus or minus the ``ceil((n + 1) * 0.9)``-th smallest of
those n absolute residuals, in logs. When the TATs are exchangeable (their order
carries no information) that covers a new TAT about 90 % of the time whatever the
residuals' distribution -- no normality is assumed -- and below 9 TATs there is no such
residual, so the interval is unbounded and :func:`tat_needed` asks for a TAT. Limits:
exchangeability fails when the link changes in a way the signals do not show (a new
cell, a new policing rule): the window of the most recent :data:`WINDOW` TATs and the
age limit of :class:`Policy` bound how long such a change goes unnoticed, not whether.
The coverage is checked on synthetic SIMs in tests/unit/test_analysis_proxy.py;
tests/e2e/test_proxy.py runs proxy mode through the emulated fleet's diurnal link and
asserts its bytes, its coverage there resting on too few held-back TATs to assert; the
coverage through the fleet is tests/e2e/test_proxy_long.py's, outside CI
(docs/abw-proxy.md, "The long run").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]

#: The interval's nominal coverage.
COVERAGE = 0.9
#: Ridge penalty on the standardised features (each column's sum of squares is n):
#: it damps the coefficients of a few TATs' noise, and leaves ABw's slope nearly whole.
RIDGE = 1.0
#: At most the most recent this many TATs train the model: older ones describe a link
#: that may have changed (a recalibration forgets them).
WINDOW = 48
#: The optional signals, in column order after log(ABw) and its relative range.
OPTIONAL = ("rtt_s", "rsrp_dbm", "sinr_db", "prev_tat_log")


@dataclass(frozen=True)
class Signals:
    """What a session measured cheaply; None where a run did not have it."""

    #: The ABw estimates around the TAT (before and after it), bit/s.
    abw_bps: tuple[float, ...]
    rtt_s: float | None = None
    rsrp_dbm: float | None = None
    sinr_db: float | None = None
    band: str | None = None
    #: The SIM's previous measured TAT, bit/s (history), if any.
    prev_tat_bps: float | None = None

    def row(self) -> dict[str, float | None]:
        """The regression's columns (None: not measured)."""
        abw = [a for a in self.abw_bps if a > 0 and math.isfinite(a)]
        mean = sum(abw) / len(abw) if abw else math.nan
        return {
            "abw_log": math.log(mean) if abw else math.nan,
            "abw_range": (max(abw) - min(abw)) / mean if abw else math.nan,
            "rtt_s": self.rtt_s,
            "rsrp_dbm": self.rsrp_dbm,
            "sinr_db": self.sinr_db,
            "prev_tat_log": (math.log(self.prev_tat_bps)
                             if self.prev_tat_bps and self.prev_tat_bps > 0 else None),
        }

    @property
    def usable(self) -> bool:
        """At least one positive ABw estimate: the one signal the model cannot do without."""
        return any(a > 0 and math.isfinite(a) for a in self.abw_bps)


@dataclass(frozen=True)
class Observation:
    """A TAT that ran, with the signals measured around it; ``time_s`` is campaign
    time (epoch seconds), which orders the history and dates the model."""

    time_s: float
    signals: Signals
    tat_bps: float


@dataclass(frozen=True)
class Prediction:
    tat_bps: float
    low_bps: float  # 0 when the interval is unbounded below
    high_bps: float  # inf when unbounded

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.high_bps)

    @property
    def relative_width(self) -> float:
        """(high - low) / prediction: 0.4 means the interval spans 40 % of the prediction."""
        return (self.high_bps - self.low_bps) / self.tat_bps if self.bounded else math.inf

    def covers(self, tat_bps: float) -> bool:
        return self.low_bps <= tat_bps <= self.high_bps


@dataclass(frozen=True)
class Model:
    """A fitted per-SIM model; build it with :func:`fit`."""

    columns: tuple[str, ...]
    mean: F64  # per column, for standardising
    scale: F64
    coef: F64  # intercept first
    #: The conformal half-width in log space (inf: too few TATs for a bounded interval).
    half_width: float
    n: int  # TATs it was fitted on
    fitted_at_s: float  # campaign time of the newest of them

    def predict(self, signals: Signals) -> Prediction:
        row = signals.row()
        if not signals.usable:
            raise ValueError("no positive ABw estimate: the proxy cannot predict")
        x = np.array([_value(row, c, self.mean[i]) for i, c in enumerate(self.columns)])
        z = (x - self.mean) / self.scale
        y = float(self.coef[0] + z @ self.coef[1:])
        if not math.isfinite(self.half_width):
            return Prediction(math.exp(y), 0.0, math.inf)
        return Prediction(math.exp(y), math.exp(y - self.half_width),
                          math.exp(y + self.half_width))


def _value(row: dict[str, float | None], column: str, fill: float) -> float:
    v = row[column]
    return fill if v is None or not math.isfinite(v) else float(v)


def conformal_rank(n: int, coverage: float = COVERAGE) -> int | None:
    """The 1-based rank of the residual that bounds the interval, or None when
    ``ceil((n + 1) * coverage) > n`` (fewer than 9 points at 90 %): no finite bound
    keeps the guarantee."""
    k = math.ceil((n + 1) * coverage - 1e-9)
    return k if k <= n else None


def fit(history: Sequence[Observation], *, coverage: float = COVERAGE,
        window: int = WINDOW, ridge: float = RIDGE) -> Model | None:
    """The model on the most recent ``window`` usable TATs of ``history``; None
    without any. Calling it again with new TATs appended is the recalibration."""
    obs = sorted((o for o in history if o.signals.usable and o.tat_bps > 0),
                 key=lambda o: o.time_s)[-window:]
    if not obs:
        return None
    rows = [o.signals.row() for o in obs]
    columns = ["abw_log", "abw_range"]
    # An optional signal is used only if every training row has it: imputing a radio
    # reading for half the rows would teach the model the imputed value's effect.
    # And only with enough TATs for its coefficient (three per column).
    for c in OPTIONAL:
        if len(obs) >= 3 * (len(columns) + 1) and all(
                r[c] is not None and math.isfinite(float(r[c] or 0)) for r in rows):
            columns.append(c)
    x = np.array([[float(r[c]) for c in columns] for r in rows])  # type: ignore[arg-type]
    y = np.log(np.array([o.tat_bps for o in obs]))
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0  # a constant column: centred to zero, no effect
    z = (x - mean) / scale
    design = np.hstack([np.ones((len(obs), 1)), z])
    n, p = design.shape
    # Imported here, not with the module: the planner imports this module, so every
    # orchestrator start would pay for scipy.linalg (about half a second of CPU on a
    # loaded 2-core machine, on a warm start's path) though most never fit a model.
    import scipy.linalg

    # Ridge as least squares on an augmented system (no penalty on the intercept).
    penalty = np.sqrt(ridge) * np.eye(p)[1:]
    coef = scipy.linalg.lstsq(np.vstack([design, penalty]),
                              np.concatenate([y, np.zeros(p - 1)]))[0]
    # Leave-one-out residuals of ridge: e_i / (1 - h_ii), h the hat matrix's diagonal.
    gram = design.T @ design + np.diag([0.0, *([ridge] * (p - 1))])
    hat = np.einsum("ij,ji->i", design, scipy.linalg.solve(gram, design.T, assume_a="pos"))
    loo = np.abs(y - design @ coef) / np.maximum(1.0 - hat, 1e-6)
    rank = conformal_rank(n, coverage)
    half = float(np.sort(loo)[rank - 1]) if rank is not None else math.inf
    return Model(tuple(columns), mean, scale, coef, half, n, obs[-1].time_s)


@dataclass(frozen=True)
class Policy:
    """When the proxy is not trusted and a real TAT must run (a campaign's ``proxy``
    block sets these; defaults in :mod:`orchestrator.scheduling.spec`)."""

    #: Interval width (high - low) over the prediction above which a TAT runs: 1.0
    #: means the 90 % interval may span at most the predicted rate itself.
    max_relative_width: float = 1.0
    #: Campaign seconds after the newest TAT after which the model is too old.
    max_age_s: float = 6 * 3600.0
    #: TATs the model needs before it is used at all (at 90 %, at least 9 give a
    #: bounded interval; more give a steadier one).
    min_tats: int = 10


@dataclass(frozen=True)
class Verdict:
    needed: bool
    reason: str


def tat_needed(model: Model | None, signals: Signals | None, *, now_s: float,
               policy: Policy) -> Verdict:
    """Is a TAT needed now? Yes with too few TATs, a model older than the policy's
    age, no usable ABw to predict from, or an interval too wide for the prediction."""
    if model is None or model.n < policy.min_tats:
        have = 0 if model is None else model.n
        return Verdict(True, f"{have} TAT(s) so far; the model needs {policy.min_tats}")
    age = now_s - model.fitted_at_s
    if age > policy.max_age_s:
        return Verdict(True, f"the newest TAT is {age / 3600:.1f} h old "
                             f"(at most {policy.max_age_s / 3600:g} h)")
    if signals is None or not signals.usable:
        return Verdict(True, "no ABw estimate to predict from")
    p = model.predict(signals)
    if p.relative_width > policy.max_relative_width:
        return Verdict(True, f"the 90% interval spans {p.relative_width:.0%} of the "
                             f"prediction (at most {policy.max_relative_width:.0%})")
    return Verdict(False, f"predicted {p.tat_bps / 1e6:.2f} Mbit/s "
                          f"[{p.low_bps / 1e6:.2f}, {p.high_bps / 1e6:.2f}]")


@dataclass(frozen=True)
class Scored:
    """A held-back TAT against what the model without it predicted."""

    time_s: float
    measured_bps: float
    prediction: Prediction


def score_sequentially(history: Sequence[Observation], *, min_tats: int,
                       coverage: float = COVERAGE) -> list[Scored]:
    """Each TAT after the first ``min_tats`` predicted by the model fitted on the TATs
    before it only: held back in time, as the proxy meets it in a campaign."""
    obs = sorted(history, key=lambda o: o.time_s)
    out = []
    for i in range(min_tats, len(obs)):
        model = fit(obs[:i], coverage=coverage)
        if model is not None and obs[i].signals.usable:
            out.append(Scored(obs[i].time_s, obs[i].tat_bps, model.predict(obs[i].signals)))
    return out


@dataclass(frozen=True)
class Evaluation:
    held_back: int
    covered: int
    median_abs_error_bps: float
    median_relative_error: float

    @property
    def coverage(self) -> float:
        return self.covered / self.held_back if self.held_back else math.nan


def evaluate(scored: Sequence[Scored]) -> Evaluation:
    """Coverage of the bounded intervals and the median absolute error."""
    bounded = [s for s in scored if s.prediction.bounded]
    errors = [abs(s.prediction.tat_bps - s.measured_bps) for s in scored]
    rel = [abs(s.prediction.tat_bps - s.measured_bps) / s.measured_bps for s in scored]
    return Evaluation(len(bounded), sum(s.prediction.covers(s.measured_bps) for s in bounded),
                      float(np.median(errors)) if errors else math.nan,
                      float(np.median(rel)) if rel else math.nan)
