"""ABw-TAT-ABw session figures from records shaped as the tools write them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testbed_kit.session import abw_run, session_figures, tat_run
from testbed_kit.tat_result import parse_iperf3

FIXTURES = Path(__file__).parent / "fixtures"
T0 = 1_795_000_000.0


def _abw(method: str, start: float, estimates: list[float], latency: float) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [
        {"type": "estimate", "method": method, "start_unix_s": start + i * 2,
         "estimate_bps": e, "latency_s": latency + 0.1 * i, "bytes_sent": 150_000,
         "control_bytes": 2_000}
        for i, e in enumerate(estimates)
    ]
    records.append({"type": "error", "kind": "busy", "error": "server busy"})
    return records


def _tat(start: float, mean_bps: float, nbytes: int) -> dict[str, Any]:
    from datetime import UTC, datetime

    return {"format": "testbed.tat", "version": 1,
            "start": datetime.fromtimestamp(start, tz=UTC).isoformat(),
            "mean_bps": mean_bps, "bin_s": 0.1, "bytes": nbytes, "sender_bytes": nbytes,
            "bins": [{"t_s": 0.0, "duration_s": 0.1, "bytes": 1, "bits_per_second": mean_bps}]}


def test_pairs_each_tat_with_the_abw_runs_around_it() -> None:
    # ABW1-TAT-ABW2, 5 min pause, ABW2-TAT-ABW1 (DESIGN.md, the seeds' science)
    abw = [
        abw_run(_abw("pathload", T0, [9e6, 11e6, 10e6, 10e6], 1.0)),
        abw_run(_abw("spruce", T0 + 60, [12e6] * 4, 0.8)),
        abw_run(_abw("spruce", T0 + 400, [8e6] * 4, 0.8)),
        abw_run(_abw("pathload", T0 + 460, [10e6] * 4, 1.0)),
    ]
    tat = [tat_run(_tat(T0 + 30, 10e6, 12_000_000)), tat_run(_tat(T0 + 430, 10e6, 12_000_000))]
    figs = session_figures(tat=tat, abw=abw)
    assert figs.tat_mean_bps == 10e6
    spruce = figs.methods["spruce"]
    assert [p.abw.start_s for p in spruce.pairs] == [T0 + 60, T0 + 400]
    assert [p.rd for p in spruce.pairs] == pytest.approx([0.2, 0.2])
    assert spruce.abs_diff_mean_bps == pytest.approx(2e6)
    pathload = figs.methods["pathload"]
    assert pathload.rd_mean == pytest.approx(0.0)
    assert pathload.latency_mean_s == pytest.approx(1.15)
    assert pathload.latency_sd_s == pytest.approx(0.1195, abs=1e-3)
    assert pathload.abw_bytes == 8 * 152_000
    assert pathload.volume_ratio == pytest.approx(24e6 / (8 * 152_000))


def test_tat_run_from_a_real_result_and_refusals() -> None:
    raw = json.loads((FIXTURES / "tcp-6mbit-iperf3.json").read_text())
    result = parse_iperf3(raw, direction="uplink", interface="op0", server="10.77.2.1",
                          port=5201)
    run = tat_run(result)
    assert len(run.bins_bps) == 31 and run.mean_bps == pytest.approx(5.7e6, rel=0.05)
    with pytest.raises(ValueError, match="not a TAT result"):
        tat_run({"format": "testbed.abw"})
    with pytest.raises(ValueError, match="no estimate"):
        abw_run([{"type": "error"}])
    with pytest.raises(ValueError, match="mix"):
        abw_run(_abw("a", T0, [1.0], 1) + _abw("b", T0, [1.0], 1))


def test_same_tool_before_and_after_each_tat_is_averaged() -> None:
    # yaz as ABW1 and ABW2: each TAT against the mean of the estimates on both sides,
    # never those around the other TAT; every step's bytes count once.
    abw = [abw_run(_abw("yaz", T0 + t, [e], 1.0)) for t, e in
           ((0, 8e6), (30, 12e6), (330, 9e6), (360, 9e6))]
    tat = [tat_run(_tat(T0 + 5, 10e6, 12_000_000)), tat_run(_tat(T0 + 335, 9e6, 12_000_000))]
    yaz = session_figures(tat=tat, abw=abw).methods["yaz"]
    assert [p.abw.mean_bps for p in yaz.pairs] == pytest.approx([10e6, 9e6])
    assert [p.rd for p in yaz.pairs] == pytest.approx([0.0, 0.0])
    assert yaz.abw_bytes == 4 * 152_000
