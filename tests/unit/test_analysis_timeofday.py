"""Time-of-day test on synthetic, unevenly sampled series (9 days, ~2-hourly)."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.analysis.timeofday import DAY_S, diurnal, diurnal_by_series, lomb_scargle


def _times(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(0, 9 * DAY_S, 2 * 3600.0) + rng.uniform(-1800, 1800, 108)
    return np.sort(t[rng.random(t.size) > 0.15])  # ~15 % of runs missing


def test_a_diurnal_series_is_significant_with_its_amplitude_and_peak() -> None:
    rng = np.random.default_rng(7)
    t = _times(7)
    # 20 Mbit/s mean, 4 Mbit/s daily swing peaking at 04:00, noise sd 4 Mbit/s
    y = 20 + 4 * np.cos(2 * np.pi * (t / DAY_S - 4 / 24)) + rng.normal(0, 4, t.size)
    r = diurnal(t, y, n_boot=499)
    assert r.significant and r.p_value < 0.01 and r.delta_bic > 2
    assert r.amplitude_ci[0] < 4 < r.amplitude_ci[1]
    assert r.delta_bic_ci[0] < r.delta_bic < r.delta_bic_ci[1]
    assert r.peak_hour == pytest.approx(4, abs=1.5)
    assert r.ls_best_period_h == pytest.approx(24, rel=0.1)


def test_a_flat_noisy_series_is_not() -> None:
    rng = np.random.default_rng(8)
    t = _times(8)
    results = diurnal_by_series(
        {f"op{i}": (list(t), list(20 + rng.normal(0, 4, t.size))) for i in range(5)},
        n_boot=199,
    )
    assert not any(r.significant for r in results.values())
    assert all(r.delta_bic < 2 for r in results.values())


def test_periodogram_peaks_at_the_period_and_short_series_are_refused() -> None:
    t = _times(3)
    freqs = 1 / np.array([6, 12, 24, 48]) / 3600
    power = lomb_scargle(t, np.sin(2 * np.pi * t / (12 * 3600)), freqs)
    assert int(np.argmax(power)) == 1
    with pytest.raises(ValueError, match="too few"):
        diurnal([0.0, 1.0], [1.0, 2.0])
