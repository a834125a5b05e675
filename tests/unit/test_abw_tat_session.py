"""The abw-tat session experiment's pure parts: step order, and the summary it writes
from recorded tool output."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import REPO

FOLDERS = [REPO / "experiments" / "abw-tat"]


@pytest.fixture(scope="module")
def session() -> Iterator[ModuleType]:
    # The experiment folder is an image's source, not a package: import it as the image
    # does (its folder on the path; the kit is the project's).
    sys.path[:0] = [str(f) for f in FOLDERS]
    try:
        import session as module

        yield module
    finally:
        for f in FOLDERS:
            sys.path.remove(str(f))
        for name in ("session", "steps", "ditg", "ditg_parse"):
            sys.modules.pop(name, None)


FIXTURES = REPO / "tests/unit/fixtures"


def test_order_is_balanced_across_halves(session: ModuleType) -> None:
    from steps import session_steps

    plan = session_steps(method1="yaz", method2="pathload", halves=2, pause_s=300)
    assert [(s.kind, s.method) for s in plan] == [
        ("abw", "yaz"), ("tat", ""), ("abw", "pathload"), ("pause", ""),
        ("abw", "pathload"), ("tat", ""), ("abw", "yaz")]
    assert plan[3].seconds == 300
    assert len(session_steps(method1="yaz", method2="yaz", halves=1, pause_s=300)) == 3


def _abw(method: str, start: float, bps: float) -> list[dict[str, Any]]:
    return [{"type": "estimate", "method": method, "start_unix_s": start + i,
             "estimate_bps": bps, "latency_s": 0.8 + 0.1 * i, "bytes_sent": 300_000,
             "control_bytes": 2_000} for i in range(4)]


def test_summary_pairs_tat_with_surrounding_abw(session: ModuleType) -> None:
    from testbed_kit.tat_result import parse_iperf3

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


def test_repetitions_repeat_the_balanced_session_with_pauses_between(
    session: ModuleType,
) -> None:
    from steps import session_steps

    plan = session_steps(method1="yaz", method2="spruce", halves=2, pause_s=300,
                         repetitions=4)
    runs = [s for s in plan if s.kind != "pause"]
    assert len(runs) == 4 * 6 and [s.seconds for s in plan if s.kind == "pause"] == [300] * 7
    assert {s.repetition for s in runs} == {0, 1, 2, 3}
    for rep in range(4):
        order = [s.method for s in runs if s.repetition == rep and s.kind == "abw"]
        assert order == ["yaz", "spruce", "spruce", "yaz"]
    one_half = session_steps(method1="yaz", method2="yaz", halves=1, pause_s=5, repetitions=2)
    assert [s.kind for s in one_half] == ["abw", "tat", "abw", "pause", "abw", "tat", "abw"]
    with pytest.raises(ValueError, match="at least one repetition"):
        session_steps(method1="yaz", method2="yaz", halves=2, pause_s=0, repetitions=0)


def test_the_manifest_defaults_to_the_reference_four_repetitions() -> None:
    from orchestrator.catalogue.loader import load_catalogue

    manifest = load_catalogue(REPO / "experiments")["abw-tat"]
    defaults = manifest.resolve_parameters({})
    assert defaults["repetitions"] == 4 and defaults["tat_tool"] == "iperf3"
    slot, data = manifest.forecast(defaults, rate_bps=10e6)
    once, once_data = manifest.forecast({**defaults, "repetitions": 1}, rate_bps=10e6)
    # four sessions and the three 5 min pauses between them (7 between the 8 halves)
    assert slot - 15 == pytest.approx(4 * (once - 15 - 300) + 7 * 300)
    assert data - 2e6 == pytest.approx(4 * (once_data - 2e6))


@pytest.mark.parametrize(("params", "needle"), [
    ({"tat_tool": "ditg", "direction": "downlink"}, "uplink only"),
    ({"tat_tool": "netperf"}, "tat_tool must be one of"),
    ({"method2": "spruce", "capacity_bps": 0}, "spruce needs the bottleneck capacity"),
])
def test_what_no_step_could_measure_is_refused_before_any_traffic(
    session: ModuleType, tmp_path: Path, params: dict[str, Any], needle: str
) -> None:
    p = {"method1": "yaz", "method2": "yaz", "direction": "uplink", "halves": 2,
         "pause_s": 0, "repetitions": 1, "tat_tool": "iperf3", **params}
    doc = session.run_session({"server_address": "192.0.2.1", "parameters": p}, tmp_path)
    assert needle in doc["error"] and doc["steps"] == []
    assert json.loads((tmp_path / "abw-tat.json").read_text())["error"] == doc["error"]


def test_ditg_decoded_log_gives_the_tat_record_of_iperf3s_shape(session: ModuleType) -> None:
    from ditg_parse import parse_ditg

    from testbed_kit.tat_result import parse_iperf3

    start = session.datetime(2026, 11, 24, 1, 38, 52, tzinfo=session.UTC)
    tat = parse_ditg(
        bitrate=(FIXTURES / "ditg-bitrate.txt").read_text(),
        receiver_summary=(FIXTURES / "ditg-recv-summary.txt").read_text(),
        sender_summary=(FIXTURES / "ditg-send-summary.txt").read_text(),
        direction="uplink", interface="op0", server="s", port=9001, start=start,
        version="2.8.1")
    raw = json.loads((FIXTURES / "tcp-6mbit-iperf3.json").read_text())
    iperf3 = parse_iperf3(raw, direction="uplink", interface="op0", server="s", port=5201)
    assert set(iperf3) - {"iperf3_version"} <= set(tat)
    assert tat["bytes"] == tat["sender_bytes"] == 2006040  # ITGDec's "Bytes received"
    assert tat["duration_s"] == pytest.approx(1.504248)
    assert tat["mean_bps"] == pytest.approx(2006040 * 8 / 1.504248)
    assert len(tat["bins"]) == 16 and tat["bins"][1]["t_s"] == pytest.approx(0.1)
    # ITGDec's Kbit/s over the full bin width give back the bytes exactly
    assert sum(b["bytes"] for b in tat["bins"]) == 2006040
    assert tat["bins"][0]["bits_per_second"] == pytest.approx(10628.8e3)
    tail = tat["bins"][-1]  # 1.5 s .. 1.504248 s: its rate over its own duration
    assert tail["duration_s"] == pytest.approx(0.004248)
    assert tail["bits_per_second"] == pytest.approx(tail["bytes"] * 8 / 0.004248)
    assert tat["start"] == start.isoformat() and tat["retransmits"] is None
    # the session summary takes it as it takes an iperf3 result
    from testbed_kit.session import tat_run

    assert tat_run(tat).mean_bps == pytest.approx(tat["mean_bps"])


def test_ditg_output_problems_are_named(session: ModuleType) -> None:
    from ditg_parse import (
        DitgOutputError,
        bitrate_bins,
        itgsend_exit_reason,
        itgsend_failure,
        summary_totals,
    )

    assert itgsend_failure("ITGSend version 2.8.1 (r1023)\nStarted sending packets of "
                           "flow ID: 1\nFinished sending packets of flow ID: 1\n") is None
    failed = ("flowSender: Address family not supported by protocol\n"
              "Could not bind a new socket. Flow ID: 1\n"
              "Error - FlowSender interrupted by an error\n")
    assert itgsend_failure(failed) == ("Could not bind a new socket. Flow ID: 1; "
                                       "Error - FlowSender interrupted by an error")
    # recorded: ITGRecv killed mid-flow, and nothing listening on the signalling port
    aborted = ("ITGSend version 2.8.1 (r1023)\nBinding to device op0\nStarted sending "
               "packets of flow ID: 1\n ** ERROR **  Flow 0 aborted:  signalManager : "
               "Receiver has shut down the connection gracefully \n Type ITGSend -h for help \n")
    assert itgsend_exit_reason(1, aborted) == (
        "the connection to ITGRecv was lost during the flow (ITGSend: ** ERROR **  Flow 0 "
        "aborted:  signalManager : Receiver has shut down the connection gracefully)")
    assert itgsend_exit_reason(-13, "Started sending packets of flow ID: 1\n").startswith(
        "the connection to ITGRecv was lost during the flow (ITGSend: broken pipe)")
    refused = ("Connect error in createTransportChan(): Connection refused\n"
               "ITGSend version 2.8.1 (r1023)\nCompile-time options: sctp dccp\n")
    assert itgsend_exit_reason(1, refused) == (
        "ITGSend exited 1: Connect error in createTransportChan(): Connection refused")
    with pytest.raises(DitgOutputError, match="no TOTAL RESULTS"):
        summary_totals("ITGDec version 2.8.1 (r1023)\n Error opening log file\n")
    with pytest.raises(DitgOutputError, match="header"):
        bitrate_bins("", bin_s=0.1, total_s=1)
    with pytest.raises(DitgOutputError, match="no bins"):
        bitrate_bins("Time 1-a-b Aggregate-Flow\n", bin_s=0.1, total_s=1)
    summary = (FIXTURES / "ditg-recv-summary.txt").read_text()
    assert "\b" not in session.ditg.clean_summary(summary)


def test_itgsend_binds_signalling_to_the_address_and_routes_the_flow(
    session: ModuleType,
) -> None:
    cmd = session.ditg.itgsend_command(
        {"server_address": "10.0.0.1", "interface": "op0", "interface_address": "10.1.0.2",
         "parameters": {}}, duration_s=20, sender_log="s.log", receiver_log="r.log")
    assert cmd[:2] == ["ITGSend", "-T"] and "-sa" not in cmd and "-Si" not in cmd
    assert cmd[cmd.index("-t") + 1] == "20000" and cmd[cmd.index("-Sdp") + 1] == "9000"
    # not bound to the device: what arrives on another (the fleet's emulator TUN) is lost
    assert cmd[cmd.index("-Ssa") + 1] == "10.1.0.2" and "-i" not in cmd
    assert cmd[cmd.index("-x") + 1] == "r.log" and cmd[cmd.index("-l") + 1] == "s.log"


def test_without_tat_a_session_is_abw_steps_only_and_says_so(session: ModuleType) -> None:
    """``tats: 0``: proxy mode's cheap session, ABW1-ABW2 per half, no TAT to pair."""
    from steps import session_steps

    plan = session_steps(method1="yaz", method2="yaz", halves=2, pause_s=5, tat=False)
    assert [s.kind for s in plan] == ["abw", "abw", "pause", "abw", "abw"]
    abws = [_abw("yaz", 0, 5.5e6), _abw("yaz", 10, 6.5e6)]
    steps = [{"kind": "abw", "iface_rx_bytes": 10_000, "iface_tx_bytes": 1_200_000}] * 2
    s = session.summarise([], abws, steps)
    assert s["tat_mean_bps"] is None and s["rd"] is None
    assert s["abw_mean_bps"] == pytest.approx(6e6)
    assert s["methods"]["yaz"]["estimates"] == 8
    assert s["abw_iface_bytes"] == 2_420_000 and s["tat_iface_bytes"] == 0
