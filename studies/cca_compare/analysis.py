"""CUBIC against BBR on the same radio (the cca-compare study, after Li et al.): the
figures per congestion control, throughput by SINR bin, with and without a handover,
and a Mann-Whitney U test of each difference (pure).

The transfers are those of ``cca_compare`` points (:mod:`studies.cca_compare.points`)
with status ``ok``. Bulk transfers and 1 MB downloads are never pooled: the reference
found them to differ (comparable bulk throughput; for 1 MB, BBR faster but with more
self-inflicted delay), so every figure here is per kind.

Mann-Whitney U (two-sided, scipy's exact distribution for small samples without ties,
else the normal approximation with tie correction) compares each metric's
distribution under one control with the other's, without assuming a shape: delay and
retransmission figures are heavily skewed. The verdict is at :data:`ALPHA`; fewer than
:data:`MIN_EACH` transfers of either control give no verdict.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: SINR bins, dB: 5 dB wide, labelled by their lower edge ("20-25 dB").
SINR_BIN_DB = 5.0
ALPHA = 0.05
#: Transfers of each control below which no test is run.
MIN_EACH = 3


@dataclass(frozen=True)
class TransferSample:
    """One measured transfer (a ``cca_compare`` point with status ok)."""

    cca: str
    kind: str  # "bulk" or "download"
    throughput_bps: float
    self_delay_s: float | None
    retrans_pct: float
    dupack_pct: float
    sinr_db: float | None
    handovers: int | None  # None: unknown (no modem sample on one side)


#: The metrics compared, with how a sample gives each and its unit on the page.
METRICS: tuple[tuple[str, Callable[[TransferSample], float | None], str], ...] = (
    ("throughput", lambda s: s.throughput_bps / 1e6, "Mbit/s"),
    ("self-inflicted delay", lambda s: None if s.self_delay_s is None
     else s.self_delay_s * 1e3, "ms"),
    ("retransmissions", lambda s: s.retrans_pct, "%"),
    ("duplicate ACKs", lambda s: s.dupack_pct, "%"),
)


def values(samples: Sequence[TransferSample],
           metric: Callable[[TransferSample], float | None]) -> list[float]:
    """The metric's finite values over ``samples``."""
    out = []
    for s in samples:
        v = metric(s)
        if v is not None and math.isfinite(v):
            out.append(v)
    return out


def sinr_bin(sinr_db: float | None, width: float = SINR_BIN_DB) -> float | None:
    """The lower edge of the SINR bin ``sinr_db`` falls in; None without a sample."""
    if sinr_db is None or not math.isfinite(sinr_db):
        return None
    return math.floor(sinr_db / width) * width


def sinr_label(low: float | None, width: float = SINR_BIN_DB) -> str:
    """A bin's label, ``"20 to 25 dB"``; ``"unknown"`` for None."""
    return "unknown" if low is None else f"{low:g} to {low + width:g} dB"


def handover_class(handovers: int | None) -> str:
    """``"with handover"``, ``"without handover"`` or ``"unknown"``."""
    if handovers is None:
        return "unknown"
    return "with handover" if handovers > 0 else "without handover"


@dataclass(frozen=True)
class Difference:
    """One metric under two controls: medians, sample sizes and the test."""

    metric: str
    unit: str
    n_a: int
    n_b: int
    median_a: float | None
    median_b: float | None
    u: float | None  # Mann-Whitney U of ``a``; None when not tested
    p_value: float | None

    @property
    def significant(self) -> bool | None:
        return None if self.p_value is None else self.p_value < ALPHA


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> tuple[float, float] | None:
    """(U of ``a``, two-sided p) or None with fewer than :data:`MIN_EACH` values on a
    side, or when every value is the same (no ranking to test: p would be 1 by fiat)."""
    if len(a) < MIN_EACH or len(b) < MIN_EACH or len({*a, *b}) < 2:
        return None
    # Imported here: scipy.stats costs about a second of import, which every process
    # start of the API (each replica, each worker) would pay for one page.
    from scipy.stats import mannwhitneyu

    res = mannwhitneyu(list(a), list(b), alternative="two-sided")
    return float(res.statistic), float(res.pvalue)


def differences(a: Sequence[TransferSample], b: Sequence[TransferSample]
                ) -> list[Difference]:
    """Every metric of :data:`METRICS`, control ``a``'s transfers against ``b``'s."""
    out = []
    for name, metric, unit in METRICS:
        va, vb = values(a, metric), values(b, metric)
        tested = mann_whitney(va, vb)
        out.append(Difference(
            metric=name, unit=unit, n_a=len(va), n_b=len(vb),
            median_a=statistics.median(va) if va else None,
            median_b=statistics.median(vb) if vb else None,
            u=tested[0] if tested else None, p_value=tested[1] if tested else None))
    return out
