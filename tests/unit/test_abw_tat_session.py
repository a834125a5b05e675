"""The abw-tat session experiment's pure parts: step order, interface counters, and the
summary it writes from recorded tool output."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import REPO

FOLDERS = [REPO / "experiments" / "tat", REPO / "experiments" / "abw-tat"]


@pytest.fixture(scope="module")
def session() -> Iterator[ModuleType]:
    # The experiment folders are image sources, not packages: import them as the image does.
    sys.path[:0] = [str(f) for f in FOLDERS]
    try:
        import session as module

        yield module
    finally:
        for f in FOLDERS:
            sys.path.remove(str(f))
        for name in ("session", "steps", "tat", "tat_parse"):
            sys.modules.pop(name, None)


def test_order_is_balanced_across_halves(session: ModuleType) -> None:
    from steps import session_steps

    plan = session_steps(method1="yaz", method2="pathload", halves=2, pause_s=300)
    assert [(s.kind, s.method) for s in plan] == [
        ("abw", "yaz"), ("tat", ""), ("abw", "pathload"), ("pause", ""),
        ("abw", "pathload"), ("tat", ""), ("abw", "yaz")]
    assert plan[3].seconds == 300
    assert len(session_steps(method1="yaz", method2="yaz", halves=1, pause_s=300)) == 3


def test_interface_counters_read_proc_net_dev(session: ModuleType, tmp_path: Path) -> None:
    from steps import interface_counters

    dev = tmp_path / "dev"
    dev.write_text(
        "Inter-|   Receive                            |  Transmit\n"
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes ...\n"
        "   op0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n"
        "    lo: 5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\n")
    assert interface_counters("op0", dev) == (1000, 2000)
    with pytest.raises(LookupError, match="op9"):
        interface_counters("op9", dev)


def _abw(method: str, start: float, bps: float) -> list[dict[str, Any]]:
    return [{"type": "estimate", "method": method, "start_unix_s": start + i,
             "estimate_bps": bps, "latency_s": 0.8 + 0.1 * i, "bytes_sent": 300_000,
             "control_bytes": 2_000} for i in range(4)]


def test_summary_pairs_tat_with_surrounding_abw(session: ModuleType) -> None:
    from tat_parse import parse_iperf3

    raw = json.loads((REPO / "tests/unit/fixtures/tcp-6mbit-iperf3.json").read_text())
    tat = parse_iperf3(raw, direction="uplink", interface="op0", server="s", port=5201)
    t0 = tat_start = session.datetime.fromisoformat(tat["start"]).timestamp()
    abws = [_abw("yaz", t0 - 10, 5.5e6), _abw("yaz", tat_start + 5, 5.7e6)]
    steps = [{"kind": "abw", "iface_rx_bytes": 10_000, "iface_tx_bytes": 1_200_000},
             {"kind": "tat", "iface_rx_bytes": 50_000, "iface_tx_bytes": 2_300_000},
             {"kind": "abw", "iface_rx_bytes": 10_000, "iface_tx_bytes": 1_200_000}]
    s = session.summarise([tat], abws, steps)
    assert s["tat_mean_bps"] == pytest.approx(tat["mean_bps"])
    assert s["abs_diff_bps"] == pytest.approx(abs(s["tat_mean_bps"] - s["abw_mean_bps"]))
    assert s["rd"] == pytest.approx(s["abs_diff_bps"] / s["tat_mean_bps"])
    assert s["methods"]["yaz"]["estimates"] == 8  # both runs around the TAT
    assert s["methods"]["yaz"]["latency_mean_s"] == pytest.approx(0.95)
    assert s["volume_ratio_iface"] == pytest.approx(2_350_000 / 2_420_000)
