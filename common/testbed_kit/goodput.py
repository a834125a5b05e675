"""First-transfer goodput: the ``testbed.goodput-sequence`` result and its figures.

After Pentikousis et al. (first-transfer goodput on 3G): after an idle gap longer than
the radio's release timer, n back-to-back transfers of D bytes each. The first one
pays for the radio's promotion (channel acquisition, ~2 s on HSPA); the rest find the
channel up. Goodput is D over the time from ``connect()`` to the last byte received.

Per run: g1 (the first transfer's goodput), the median, mean and quartiles of the
others, the 95 % confidence interval of their median, and whether g1 lies below it
(by more than the host's timing resolution, :data:`RESOLUTION_S`).
The experiment writes these figures; the orchestrator's ingest and pages compute them
again with this same code from the per-transfer goodputs, so a figure never depends on
which side computed it. Standard library only (the kit's rule).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

FORMAT = "testbed.goodput-sequence"
#: Raised when a reader would misread the layout (docs/goodput-sequence.md).
VERSION = 1
#: The interval's confidence, as the reference's error bars.
CONFIDENCE = 0.95
#: A first transfer counts as below the interval only when it took this much longer
#: than a transfer at the interval's lower end, seconds. On an emulated link without
#: jitter the interval narrows to a fraction of a per cent, and the first transfer
#: after a sleep is a millisecond slower for reasons of the host (caches, timers
#: waking): measured on the fleet's flat link, 256 KB in 0.640 s against 0.639 s. 10 ms
#: is ten times that, and a tenth of the smallest radio promotion (LTE's ~100 ms; 3G's
#: ~2 s). On a real link the interval is wider than 10 ms anyway.
RESOLUTION_S = 0.010
#: The fewest other transfers with a distribution-free 95 % interval of their median:
#: with m values the widest interval [x(1), x(m)] covers the median with probability
#: 1 - 2 * 0.5**m, which first reaches 0.95 at m = 6.
MIN_REST = 6


class GoodputError(ValueError):
    """A result or a set of transfers these figures cannot be computed from."""


def goodput_bps(size_bytes: int, seconds: float) -> float:
    """D over the transfer's time, in bit/s."""
    if seconds <= 0:
        raise GoodputError(f"a transfer of {size_bytes} bytes took {seconds} s: not a time")
    return size_bytes * 8 / seconds


def _binom_cdf_half(k: int, m: int) -> float:
    """P(B <= k) for B ~ Binomial(m, 1/2)."""
    return float(sum(math.comb(m, i) for i in range(k + 1)) / 2**m)


def median_ci(values: Sequence[float], confidence: float = CONFIDENCE
              ) -> tuple[float, float, float]:
    """The distribution-free confidence interval of the median of ``values``:
    ``(low, high, achieved confidence)``.

    Order statistics: the number of values below the true median is Binomial(m, 1/2),
    so [x(j), x(m-j+1)] (1-based, sorted) covers it with probability
    1 - 2 P(B <= j-1). j is the largest index keeping that at or above ``confidence``
    (Conover, Practical Nonparametric Statistics, 3rd ed., 1999, section 3.2; the
    table of Le Boudec, Performance Evaluation of Computer and Communication Systems,
    2010, Theorem 2.1 and Table A.1: for m = 100, j = 40 and m-j+1 = 61). No
    assumption on the distribution of goodputs, which are skewed by slow start.
    """
    vs = sorted(values)
    m = len(vs)
    if m < MIN_REST:
        raise GoodputError(f"{m} values: a {confidence:.0%} interval of the median needs "
                           f"at least {MIN_REST}")
    alpha = 1 - confidence
    j = 1
    while 2 * _binom_cdf_half(j, m) <= alpha:  # can index j+1 still hold the level?
        j += 1
    return vs[j - 1], vs[m - j], 1 - 2 * _binom_cdf_half(j - 1, m)


@dataclass(frozen=True)
class GoodputSummary:
    """One run's figures, bit/s."""

    transfers: int
    g1_bps: float
    median_bps: float
    mean_bps: float
    q1_bps: float
    q3_bps: float
    ci_low_bps: float
    ci_high_bps: float
    ci_level: float  # the interval's achieved confidence (>= 0.95)
    #: How much longer the first transfer took than one at the interval's lower end,
    #: seconds (negative: it was faster); None when D is not known.
    g1_excess_s: float | None
    g1_below_ci: bool  # below the interval, by more than RESOLUTION_S

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarise(goodputs: Sequence[float], size_bytes: int | None = None) -> GoodputSummary:
    """The figures of a run from its transfers' goodputs in order (the first is g1) and
    their size D, which turns goodputs back into times for the resolution test (without
    it, any g1 under the interval counts as below)."""
    if len(goodputs) < MIN_REST + 1:
        raise GoodputError(f"{len(goodputs)} transfers: the first and at least "
                           f"{MIN_REST} more are needed")
    g1, rest = goodputs[0], list(goodputs[1:])
    low, high, level = median_ci(rest)
    q1, median, q3 = statistics.quantiles(rest, n=4, method="inclusive")
    excess = None if size_bytes is None else size_bytes * 8 * (1 / g1 - 1 / low)
    return GoodputSummary(
        transfers=len(goodputs), g1_bps=g1, median_bps=median,
        mean_bps=statistics.fmean(rest), q1_bps=q1, q3_bps=q3, ci_low_bps=low,
        ci_high_bps=high, ci_level=level, g1_excess_s=excess,
        g1_below_ci=g1 < low and (excess is None or excess > RESOLUTION_S))


def transfer_goodputs(result: Mapping[str, Any]) -> list[float]:
    """The goodputs of a ``testbed.goodput-sequence`` v1 result's transfers, in order,
    recomputed from each transfer's bytes and time; GoodputError for another format or
    version, or a transfer short of its bytes."""
    if result.get("format") != FORMAT or result.get("version") != VERSION:
        raise GoodputError(f"not a {FORMAT} v{VERSION} result: {result.get('format')!r} "
                           f"v{result.get('version')!r}")
    size = int(result["size_bytes"])
    out = []
    for t in result["transfers"]:
        if int(t["bytes"]) != size:
            raise GoodputError(f"transfer {t['index']} moved {t['bytes']} of {size} bytes")
        out.append(goodput_bps(size, float(t["total_s"])))
    return out
