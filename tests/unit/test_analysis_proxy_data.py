"""A proxy-mode campaign's points into each SIM's proxy history
(orchestrator/analysis/proxy_data.py): which ABw steps are a TAT's signals, which are
the cheap sessions' stand-in points, and what each run cost."""

from __future__ import annotations

import pytest

from orchestrator.analysis.proxy_data import AbwPoint, ModemPoint, SimId, TatPoint, histories

S = 10**9
TELIA = SimId("se-01", "240-01", "Telia")
TELE2 = SimId("se-01", "240-07", "Tele2")


def abw(sim: SimId, run: str, step: int, t: float, bps: float) -> list[AbwPoint]:
    """One ABw step: two estimates a second apart, 0.5 MB each, RTT 40 ms."""
    return [AbwPoint(int((t + i) * S), sim, run, step, bps * (1 + 0.02 * i), 500_000, 0.04)
            for i in range(2)]


def full_session(sim: SimId, run: str, t0: float) -> tuple[list[TatPoint], list[AbwPoint]]:
    """ABW1-TAT-ABW2, pause, ABW2-TAT-ABW1: steps 0, 2, 4, 6 and TATs at 1, 5."""
    tats = [TatPoint(int((t0 + 10) * S), sim, run, 8e6, 12_000_000),
            TatPoint(int((t0 + 70) * S), sim, run, 6e6, 9_000_000)]
    abws = [*abw(sim, run, 0, t0, 7e6), *abw(sim, run, 2, t0 + 30, 7.5e6),
            *abw(sim, run, 4, t0 + 60, 5e6), *abw(sim, run, 6, t0 + 90, 5.5e6)]
    return tats, abws


def test_each_tat_is_paired_with_the_abw_steps_on_either_side() -> None:
    tats, abws = full_session(TELIA, "r1", 1000)
    modems = [ModemPoint(TELIA, "r1", -90, 10, "3"), ModemPoint(TELIA, "r1", -94, 14, "3"),
              ModemPoint(TELE2, "r1", -120, -5, "20")]  # the node's other modem
    (h,) = histories(tats, abws, modems).values()
    assert h.sim == TELIA and not h.cheap
    first, second = h.observations
    assert first.tat_bps == 8e6 and second.tat_bps == 6e6
    assert first.signals.abw_bps == pytest.approx((7e6, 7.14e6, 7.5e6, 7.65e6))
    assert second.signals.abw_bps == pytest.approx((5e6, 5.1e6, 5.5e6, 5.61e6))
    assert first.signals.rtt_s == pytest.approx(0.04)
    assert (first.signals.rsrp_dbm, first.signals.sinr_db, first.signals.band) == (-92, 12, "3")
    assert first.time_s == 1010
    (cost,) = h.runs
    assert cost.tat and cost.bytes == 21_000_000 + 8 * 500_000


def test_a_cheap_session_gives_a_stand_in_point_per_pair_of_abw_steps() -> None:
    tats, abws = full_session(TELIA, "r1", 1000)
    cheap = [*abw(TELIA, "r2", 0, 5000, 6e6), *abw(TELIA, "r2", 1, 5010, 6.2e6),
             *abw(TELIA, "r2", 3, 5300, 4e6), *abw(TELIA, "r2", 4, 5310, 4.2e6)]
    other = abw(TELE2, "r3", 0, 6000, 3e6) + abw(TELE2, "r3", 1, 6010, 3e6)
    hs = histories(tats, [*abws, *cheap, *other])
    h = hs[TELIA]
    assert [c.time_s for c in h.cheap] == [5000, 5300]
    assert h.cheap[0].signals.abw_bps == pytest.approx((6e6, 6.12e6, 6.2e6, 6.324e6))
    assert [(r.run, r.tat, r.bytes) for r in h.runs] == [("r1", True, 25_000_000),
                                                         ("r2", False, 4_000_000)]
    assert len(hs[TELE2].cheap) == 1 and not hs[TELE2].observations
