"""Is there a daily cycle in a measured series? Time-of-day effects as the seeds test them.

Measurements every 2 h (or hourly) over days, with gaps where a node was down or out of
quota, are unevenly sampled, so the spectrum is a Lomb-Scargle periodogram (Lomb 1976,
Scargle 1982) rather than an FFT. Whether the 24 h cycle is real is decided by model
choice: a sinusoid with a one-day period (mean, cosine and sine terms) against a
constant (noise) model, by the difference of their Bayesian information criteria
(Schwarz 1978). A positive difference favours the cycle; above 2 it is "positive
evidence" on Kass & Raftery's (1995) scale. Because radio measurements are far from
Gaussian, the difference is also tested by permutation: shuffling the values over the
times destroys any cycle while keeping the distribution, and the p-value is the share
of shuffles that fit a sinusoid at least as well. Confidence intervals come from a
residual bootstrap of the fitted sinusoid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

DAY_S = 86_400.0
#: Periods the periodogram scans, from 2 h (the seeds' measurement spacing) to 4 days.
PERIOD_RANGE_S = (2 * 3600.0, 4 * DAY_S)
#: Fewest samples for a verdict: 3 parameters need a few days of 2-hourly points.
MIN_SAMPLES = 12
_CHUNK = 256  # permutations solved per matrix product, to bound memory

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class DiurnalResult:
    n: int
    significant: bool
    p_value: float  # permutation test of delta_bic
    delta_bic: float  # BIC(constant) - BIC(daily sinusoid); > 0 favours the cycle
    delta_bic_ci: tuple[float, float]
    amplitude: float  # half the peak-to-trough swing, in the series' unit
    amplitude_ci: tuple[float, float]
    peak_hour: float  # time of day (of the given time base, e.g. UTC) of the maximum
    ls_best_period_h: float  # strongest period in PERIOD_RANGE_S
    ls_power_24h: float  # normalised Lomb-Scargle power at one day


def lomb_scargle(t: Array, y: Array, freqs_hz: Array) -> Array:
    """Normalised Lomb-Scargle power (Scargle 1982, eq. 10; divided by 2 var(y))."""
    y = y - y.mean()
    var = float(y.var())
    if var == 0.0:
        return np.zeros_like(freqs_hz)
    w = 2 * np.pi * freqs_hz[:, None]
    tau = np.arctan2(np.sin(2 * w * t).sum(axis=1), np.cos(2 * w * t).sum(axis=1)) / (
        2 * w[:, 0])
    arg = w * (t - tau[:, None])
    c, s = np.cos(arg), np.sin(arg)
    power = (c @ y) ** 2 / (c * c).sum(axis=1) + (s @ y) ** 2 / (s * s).sum(axis=1)
    result: Array = power / (2 * var)
    return result


def _design(t: Array, period_s: float) -> Array:
    phase = 2 * np.pi * t / period_s
    return np.column_stack([np.ones_like(t), np.cos(phase), np.sin(phase)])


def _delta_bic(n: int, rss_const: Array | float, rss_sin: Array) -> Array:
    # Gaussian likelihoods: BIC = n ln(RSS / n) + k ln n; the sinusoid has 2 more
    # parameters (cosine and sine amplitudes) than the constant.
    tiny = np.finfo(np.float64).tiny
    result: Array = n * np.log(np.maximum(rss_const, tiny) / np.maximum(rss_sin, tiny)) \
        - 2 * np.log(n)
    return result


def _fit(x: Array, pinv: Array, ys: Array) -> tuple[Array, Array]:
    """Least-squares coefficients and residual sums for the columns of ``ys``."""
    beta = pinv @ ys
    resid = ys - x @ beta
    return beta, (resid * resid).sum(axis=0)


def diurnal(
    t_s: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    period_s: float = DAY_S,
    n_boot: int = 999,
    alpha: float = 0.05,
    min_delta_bic: float = 2.0,
    seed: int = 0,
) -> DiurnalResult:
    """Test one series (times in seconds, e.g. Unix time) for a cycle of ``period_s``.

    Significant when the permutation p-value is below ``alpha`` and the BIC difference
    exceeds ``min_delta_bic``. ``seed`` makes the resampling reproducible.
    """
    t = np.asarray(t_s, dtype=np.float64)
    v = np.asarray(y, dtype=np.float64)
    keep = np.isfinite(t) & np.isfinite(v)
    t, v = t[keep], v[keep]
    n = int(t.size)
    if n < MIN_SAMPLES:
        raise ValueError(f"{n} samples are too few for a time-of-day test (need {MIN_SAMPLES})")
    if n_boot < 99:
        raise ValueError("n_boot below 99 cannot give a p-value under 0.01")
    rng = np.random.default_rng(seed)
    x = _design(t, period_s)
    pinv: Array = np.linalg.pinv(x).astype(np.float64)
    rss_const = float(((v - v.mean()) ** 2).sum())
    beta, rss = _fit(x, pinv, v[:, None])
    observed = float(_delta_bic(n, rss_const, rss)[0])
    fitted = x @ beta[:, 0]
    resid = v - fitted

    exceed = 0
    boot_dbic: list[Array] = []
    boot_amp: list[Array] = []
    for done in range(0, n_boot, _CHUNK):
        k = min(_CHUNK, n_boot - done)
        perms = np.argsort(rng.random((n, k)), axis=0)
        _, rss_p = _fit(x, pinv, v[perms])
        exceed += int((_delta_bic(n, rss_const, rss_p) >= observed).sum())
        ys = fitted[:, None] + resid[rng.integers(0, n, size=(n, k))]
        beta_b, rss_b = _fit(x, pinv, ys)
        rss_const_b = ((ys - ys.mean(axis=0)) ** 2).sum(axis=0)
        boot_dbic.append(_delta_bic(n, rss_const_b, rss_b))
        boot_amp.append(np.hypot(beta_b[1], beta_b[2]))
    p_value = (exceed + 1) / (n_boot + 1)
    dbic_all, amp_all = np.concatenate(boot_dbic), np.concatenate(boot_amp)
    lo, hi = 100 * alpha / 2, 100 * (1 - alpha / 2)

    a, b = float(beta[1, 0]), float(beta[2, 0])
    peak_phase = np.arctan2(b, a) % (2 * np.pi)  # a cos + b sin peaks at atan2(b, a)
    freqs = np.linspace(1 / PERIOD_RANGE_S[1], 1 / PERIOD_RANGE_S[0], 2000)
    power = lomb_scargle(t, v, freqs)
    return DiurnalResult(
        n=n,
        significant=bool(p_value < alpha and observed > min_delta_bic),
        p_value=p_value,
        delta_bic=observed,
        delta_bic_ci=(float(np.percentile(dbic_all, lo)), float(np.percentile(dbic_all, hi))),
        amplitude=float(np.hypot(a, b)),
        amplitude_ci=(float(np.percentile(amp_all, lo)), float(np.percentile(amp_all, hi))),
        peak_hour=float(peak_phase / (2 * np.pi) * period_s / 3600) % 24,
        ls_best_period_h=float(1 / freqs[int(np.argmax(power))] / 3600),
        ls_power_24h=float(lomb_scargle(t, v, np.array([1 / DAY_S]))[0]),
    )


def diurnal_by_series(
    series: Mapping[str, tuple[npt.ArrayLike, npt.ArrayLike]], **options: float
) -> dict[str, DiurnalResult]:
    """:func:`diurnal` for each named series (e.g. one per operator), same options."""
    seed = int(options.pop("seed", 0))
    n_boot = int(options.pop("n_boot", 999))
    return {
        name: diurnal(t, y, seed=seed, n_boot=n_boot, **options)
        for name, (t, y) in series.items()
    }
