"""The calibrated TAT proxy on synthetic SIMs (orchestrator/analysis/proxy.py).

Each synthetic SIM has a link whose capacity follows a daily load curve; ABw sees it
with its own bias and noise (as the estimator does on a fluctuating link), TAT with
another; SINR follows the load loosely. The coverage tests hold every TAT back in time:
it is predicted by the model fitted on the TATs before it only, as in a campaign.

Sample size: 40 SIMs x 50 held-back TATs = 2,000 intervals. If the true coverage is
90 %, the observed one has a standard deviation of sqrt(0.9 * 0.1 / 2000) = 0.67
points, so the 85-95 % band is 7.4 standard deviations wide on each side: a calibrated
method fails it with probability below 1e-12, and one whose true coverage is 82 % or 97 %
passes it with probability below 1e-4. The seeds are fixed, so the run is repeatable.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestrator.analysis.proxy import (
    Observation,
    Policy,
    Signals,
    conformal_rank,
    evaluate,
    fit,
    score_sequentially,
    tat_needed,
)

HOUR = 3600.0


def sim_history(seed: int, n: int, *, noise: str = "normal", radio: bool = True,
                tat_sd: float = 0.12) -> list[Observation]:
    """One SIM's hourly sessions: capacity 4-40 Mbit/s times a daily load curve."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(4e6, 40e6)
    ratio = rng.uniform(0.7, 1.1)  # TAT over capacity (TCP's efficiency on this SIM)
    abw_bias = rng.uniform(0.8, 1.2)
    out = []
    prev: float | None = None
    for i in range(n):
        t = i * HOUR
        load = 0.5 + 0.4 * math.sin(2 * math.pi * t / (24 * HOUR))
        cap = base * (1 - 0.6 * load)
        eps = (rng.standard_t(3) * tat_sd / math.sqrt(3) if noise == "t3"
               else rng.normal(0, tat_sd))
        tat = cap * ratio * math.exp(eps)
        abw = tuple(cap * abw_bias * math.exp(rng.normal(0, 0.15)) for _ in range(2))
        sig = Signals(
            abw_bps=abw, rtt_s=0.04 + 0.02 * load + rng.normal(0, 0.003),
            rsrp_dbm=(-95 + rng.normal(0, 3)) if radio else None,
            sinr_db=(12 - 8 * load + rng.normal(0, 2)) if radio else None,
            prev_tat_bps=prev)
        out.append(Observation(t, sig, tat))
        prev = tat
    return out


def pooled(noise: str, *, radio: bool = True) -> tuple[float, float, int]:
    scored = [s for sim in range(40)
              for s in score_sequentially(sim_history(1000 + sim, 60, noise=noise, radio=radio),
                                          min_tats=10)]
    ev = evaluate(scored)
    return ev.coverage, ev.median_relative_error, ev.held_back


@pytest.mark.parametrize(("noise", "radio"), [("normal", True), ("t3", True),
                                              ("normal", False)])
def test_the_90_percent_interval_covers_85_to_95_percent_of_held_back_tats(
        noise: str, radio: bool) -> None:
    coverage, median_rel_error, held_back = pooled(noise, radio=radio)
    assert held_back == 2000
    assert 0.85 <= coverage <= 0.95, coverage
    # And the prediction is useful: its median error is near the TAT's own noise
    # (12 % sd, median absolute 8 %), far below ABw's own 15 % noise per estimate
    # plus up to 20 % bias.
    assert median_rel_error < 0.13, median_rel_error


def test_in_sample_residuals_would_not_be_calibrated() -> None:
    """The check above can fail: the same regression's interval taken from its
    in-sample residuals (not left out) covers visibly less than 90 %."""
    covered = total = 0
    for sim in range(40):
        obs = sim_history(1000 + sim, 60)
        for i in range(10, 60):
            m = fit(obs[:i])
            assert m is not None
            rows = [o.signals for o in obs[:i]]
            resid = sorted(abs(math.log(o.tat_bps / m.predict(s).tat_bps))
                           for o, s in zip(obs[:i], rows, strict=True))
            q = resid[math.ceil(0.9 * i) - 1]
            p = m.predict(obs[i].signals).tat_bps
            covered += abs(math.log(obs[i].tat_bps / p)) <= q
            total += 1
    assert covered / total < 0.85


def test_below_nine_tats_the_interval_is_unbounded_and_a_tat_is_asked_for() -> None:
    assert conformal_rank(8) is None and conformal_rank(9) == 9 and conformal_rank(19) == 18
    obs = sim_history(5, 8)
    m = fit(obs)
    assert m is not None and m.n == 8
    p = m.predict(obs[-1].signals)
    assert not p.bounded and p.relative_width == math.inf
    v = tat_needed(m, obs[-1].signals, now_s=obs[-1].time_s, policy=Policy(min_tats=5))
    assert v.needed and "interval" in v.reason
    v = tat_needed(m, obs[-1].signals, now_s=obs[-1].time_s, policy=Policy())
    assert v.needed and "8 TAT(s)" in v.reason
    assert tat_needed(None, None, now_s=0, policy=Policy()).needed


def test_a_fresh_narrow_model_needs_no_tat_and_a_wide_or_old_one_does() -> None:
    obs = sim_history(6, 30, tat_sd=0.05)
    m = fit(obs)
    assert m is not None
    now = obs[-1].time_s + HOUR
    nxt = sim_history(6, 31, tat_sd=0.05)[-1].signals
    fresh = tat_needed(m, nxt, now_s=now, policy=Policy(max_relative_width=0.6))
    assert not fresh.needed, fresh.reason
    assert "predicted" in fresh.reason
    # The same SIM measured with three times the noise: the interval widens past the bound.
    noisy = fit(sim_history(6, 30, tat_sd=0.3))
    assert noisy is not None
    wide = tat_needed(noisy, nxt, now_s=now, policy=Policy(max_relative_width=0.6))
    assert wide.needed and "interval spans" in wide.reason
    old = tat_needed(m, nxt, now_s=obs[-1].time_s + 7 * HOUR, policy=Policy())
    assert old.needed and "old" in old.reason
    assert tat_needed(m, Signals(abw_bps=()), now_s=now, policy=Policy()).needed


def test_recalibration_follows_a_link_that_changed() -> None:
    """After the SIM's TAT/ABw ratio halves (a new policing rule), new TATs refit
    the model: once the window holds only new TATs, it predicts the new level."""
    obs = sim_history(7, 30, tat_sd=0.05)
    changed = [Observation(o.time_s + 30 * HOUR, o.signals, o.tat_bps / 2)
               for o in sim_history(7, 48, tat_sd=0.05)]
    before = fit(obs)
    after = fit([*obs, *changed])
    assert before is not None and after is not None and after.n == 48
    sig = changed[-1].signals
    assert before.predict(sig).tat_bps / changed[-1].tat_bps > 1.6
    assert after.predict(sig).covers(changed[-1].tat_bps)


def test_radio_signals_are_used_only_when_every_training_tat_has_them() -> None:
    obs = sim_history(8, 20)
    assert set(fit(obs).columns) >= {"rsrp_dbm", "sinr_db"}  # type: ignore[union-attr]
    partial = [*sim_history(8, 20, radio=False)[:5], *obs[5:]]
    assert not {"rsrp_dbm", "sinr_db"} & set(fit(partial).columns)  # type: ignore[union-attr]
    # A model without radio signals still predicts a session that has them.
    m = fit(partial)
    assert m is not None and m.predict(obs[-1].signals).tat_bps > 0
