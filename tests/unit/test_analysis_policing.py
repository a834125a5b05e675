"""Policing profiles on synthetic TAT bins with the shapes the seeds saw."""

from __future__ import annotations

import random

import pytest

from orchestrator.analysis.policing import PolicingKind, classify_policing


def _noisy(values: list[float], sd: float = 0.05, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [max(0.0, v * (1 + rng.gauss(0, sd))) for v in values]


def test_flat_link() -> None:
    p = classify_policing(_noisy([10e6] * 100))
    assert p.kind is PolicingKind.FLAT
    assert p.stable_bps == pytest.approx(10e6, rel=0.03) and p.time_to_90_s < 0.5


def test_lte_ramp_of_ten_seconds() -> None:
    # 0 -> 20 Mbit/s over 10 s, then stable for 20 s
    bins = [20e6 * min(1.0, (i + 1) / 100) for i in range(300)]
    p = classify_policing(_noisy(bins))
    assert p.kind is PolicingKind.RAMP
    assert p.time_to_90_s == pytest.approx(9.0, abs=0.5)
    assert p.stable_bps == pytest.approx(20e6, rel=0.03)


def test_3g_peak_then_drop() -> None:
    bins = [1e6] * 3 + [16e6] * 47 + [4e6] * 150  # 5 s at 16 Mbit/s, then 4 Mbit/s
    p = classify_policing(_noisy(bins))
    assert p.kind is PolicingKind.PEAK_THEN_DROP
    assert p.peak_bps == pytest.approx(16e6, rel=0.05)
    assert p.stable_bps == pytest.approx(4e6, rel=0.05)
    assert p.drop_s == pytest.approx(5.0, abs=0.3)
    assert "x the stable 4.0" in p.reason


def test_a_single_burst_is_no_peak_and_short_series_are_refused() -> None:
    bins = _noisy([10e6] * 100)
    bins[5] = 60e6  # one bunched bin (radio scheduling)
    assert classify_policing(bins).kind is PolicingKind.FLAT
    with pytest.raises(ValueError, match="at least 3 s"):
        classify_policing([1e6] * 10)
