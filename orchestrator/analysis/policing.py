"""An operator's policing profile, read from TAT's 100 ms receiver bins.

The seeds saw two shapes besides a plain flat rate: on LTE a ramp of about 10 s before
the stable rate, on 3G a peak followed by a drop to a lower stable rate (a token bucket
that empties). Both last far longer than TCP's own start-up: slow start from an initial
window of 10 segments (RFC 6928) doubles every round trip, so even at a 100 ms RTT it
covers 10 * 2^10 segments (~15 MB in flight) within 1 s. A shape that takes longer than
``ramp_s`` (2 s) is the network's doing, not TCP's.

The bins are smoothed with a moving median (5 bins = 0.5 s) so one late or bunched bin,
common on radio links, neither fakes a peak nor ends a ramp.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

#: Fewest bins worth classifying: 3 s at 100 ms, long enough to see a 2 s ramp end.
MIN_BINS = 30


class PolicingKind(StrEnum):
    FLAT = "flat"
    RAMP = "ramp"
    PEAK_THEN_DROP = "peak_then_drop"


@dataclass(frozen=True)
class PolicingProfile:
    kind: PolicingKind
    stable_bps: float  # median of the last part of the transfer
    time_to_90_s: float  # first time the smoothed rate reached 90 % of the stable rate
    peak_bps: float  # highest smoothed rate before the stable part
    drop_s: float | None  # peak-then-drop: when the rate fell half-way to the stable rate
    reason: str


def _moving_median(values: Sequence[float], window: int) -> list[float]:
    half = window // 2
    return [
        statistics.median(values[max(0, i - half) : i + half + 1]) for i in range(len(values))
    ]


def classify_policing(
    bins_bps: Sequence[float],
    *,
    bin_s: float = 0.1,
    smooth_bins: int = 5,
    stable_fraction: float = 0.3,
    peak_ratio: float = 1.3,
    ramp_s: float = 2.0,
) -> PolicingProfile:
    """Classify a transfer's rate series as flat, ramp or peak-then-drop.

    ``stable_fraction``: the trailing share of the transfer taken as its stable rate.
    ``peak_ratio``: how far above the stable rate the early peak must rise (30 %: well
    beyond the few-percent jitter of a shaped link's 100 ms bins).
    """
    if len(bins_bps) < MIN_BINS:
        raise ValueError(
            f"{len(bins_bps)} bins are too few to classify policing; run TAT for at least "
            f"{MIN_BINS * bin_s:.0f} s"
        )
    if not 0 < stable_fraction < 1:
        raise ValueError("stable_fraction must be between 0 and 1")
    smooth = _moving_median(list(bins_bps), smooth_bins)
    tail = max(1, round(len(bins_bps) * stable_fraction))
    stable = statistics.median(bins_bps[-tail:])
    head = smooth[: len(smooth) - tail]
    peak_at = max(range(len(head)), key=head.__getitem__)
    peak = head[peak_at]
    t90 = next((i for i, v in enumerate(smooth) if v >= 0.9 * stable), len(smooth)) * bin_s
    if stable > 0 and peak >= peak_ratio * stable:
        half_way = (peak + stable) / 2
        drop = next((i for i in range(peak_at, len(smooth)) if smooth[i] <= half_way), None)
        drop_s = drop * bin_s if drop is not None else None
        return PolicingProfile(
            kind=PolicingKind.PEAK_THEN_DROP, stable_bps=stable, time_to_90_s=t90,
            peak_bps=peak, drop_s=drop_s,
            reason=f"peak {peak / 1e6:.2f} Mbit/s is {peak / stable:.1f}x the stable "
                   f"{stable / 1e6:.2f} Mbit/s",
        )
    if t90 >= ramp_s:
        return PolicingProfile(
            kind=PolicingKind.RAMP, stable_bps=stable, time_to_90_s=t90, peak_bps=peak,
            drop_s=None,
            reason=f"{t90:.1f} s to 90 % of the stable {stable / 1e6:.2f} Mbit/s "
                   f"(more than {ramp_s:.0f} s: longer than slow start)",
        )
    return PolicingProfile(
        kind=PolicingKind.FLAT, stable_bps=stable, time_to_90_s=t90, peak_bps=peak,
        drop_s=None,
        reason=f"stable {stable / 1e6:.2f} Mbit/s within {t90:.1f} s, no peak above "
               f"{peak_ratio:.1f}x",
    )
