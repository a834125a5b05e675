"""How reliable is the long proxy run's coverage check? (docs/abw-proxy.md, "The long
run"; tests/e2e/test_proxy_long.py.)

The long run asserts that the calibrated TAT proxy's 90 % intervals cover 85-95 % of
its held-back TATs, pooled over 7 SIMs of 4 full sessions of 10 TATs each (217 held
back). This simulates that design on synthetic SIMs and prints, per size of a shared
per-session error, the mean pooled coverage, its standard deviation over repetitions of
the whole run, and the share of runs inside 85-95 %: the chance that a calibrated proxy
passes the check.

Each SIM: capacity 4-10 Mbit/s times a load curve on a clock of its own (a day of
430-600 s, sessions 600 s apart, a TAT every 5 s within one, as on the fleet); TAT is a
SIM-specific share of it with 10 % noise, ABw two estimates with the SIM's own bias and
15 % noise each. The per-session error, shared by a session's ten TATs and unseen by
ABw (the machine's load during that session, a change of the link between sessions),
is what makes TATs of one session correlated. Scored as the ``abw-proxy`` page scores:
each TAT from the SIM's 10th on, by the model fitted on the TATs before it.

    .venv/bin/python bench/proxy_coverage.py [--runs 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from orchestrator.analysis.proxy import Observation, Signals, evaluate, score_sequentially

SIMS, SESSIONS, TATS = 7, 4, 10


def sim(rng: np.random.Generator, session_sd: float, *, tat_sd: float = 0.10,
        abw_sd: float = 0.15) -> list[Observation]:
    base, ratio, bias = rng.uniform(4e6, 10e6), rng.uniform(0.8, 1.0), rng.uniform(0.8, 1.2)
    day_s = rng.uniform(430, 600)
    out = []
    for s in range(SESSIONS):
        shared = rng.normal(0, session_sd)
        for k in range(TATS):
            t = s * 600.0 + 5 * k
            load = 0.5 + 0.45 * math.sin(2 * math.pi * t / day_s)
            cap = base * (1 - 0.5 * load)
            tat = cap * ratio * math.exp(shared + rng.normal(0, tat_sd))
            abw = tuple(cap * bias * math.exp(rng.normal(0, abw_sd)) for _ in range(2))
            out.append(Observation(t, Signals(abw_bps=abw), tat))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200, help="repetitions of the whole run")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print("session sd | held back | mean coverage | sd | P(85-95 %)")
    for session_sd in (0.0, 0.05, 0.10):
        cov = []
        held = 0
        for _ in range(args.runs):
            ev = evaluate([x for _ in range(SIMS)
                           for x in score_sequentially(sim(rng, session_sd), min_tats=9)])
            cov.append(ev.coverage)
            held = ev.held_back
        c = np.array(cov)
        inside = float(np.mean((c >= 0.85) & (c <= 0.95)))
        print(f"{session_sd:10.2f} | {held:9d} | {c.mean():13.3f} | {c.std():.3f} | {inside:.2f}")


if __name__ == "__main__":
    main()
