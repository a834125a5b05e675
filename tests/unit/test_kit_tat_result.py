"""The kit's TAT parser (iperf3 report -> ``testbed.tat``) on recorded iperf3 3.12 output,
and its reading of the kernel's TCP table.

Fixtures were recorded between two containers on a Docker network, the sender's eth0
shaped with ``tc qdisc add dev eth0 root tbf rate 10mbit burst 32kbit latency 50ms``:
``iperf3_uplink.json`` is a 5 s uplink run (server ``iperf3 -s -J -i 0.1``),
``iperf3_downlink.json`` a 3 s ``-R`` run (the server side unshaped, so Gbit/s).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from testbed_kit import tat_result as tat_parse
from testbed_kit.connections import established_to

FIXTURES = Path(__file__).parent / "fixtures"


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def _parse(raw: dict[str, Any], direction: str, bin_s: float = 0.1) -> dict[str, Any]:
    result: dict[str, Any] = tat_parse.parse_iperf3(
        raw, direction=direction, interface="op0", server="172.30.1.10", port=5203,
        bin_s=bin_s,
    )
    return result


def test_uplink_bins_come_from_the_server_receiver() -> None:
    raw = _fixture("iperf3_uplink.json")
    result = _parse(raw, "uplink")
    server_intervals = raw["server_output_json"]["intervals"]
    assert result["format"] == "testbed.tat" and result["version"] == 1
    assert result["bins_source"] == "receiver"
    assert len(result["bins"]) == len(server_intervals) == 51
    assert [b["bytes"] for b in result["bins"]] == [
        i["sum"]["bytes"] for i in server_intervals
    ]
    # Receiver totals, not the sender's (the tbf queue dropped what was sent above 10 Mbit/s).
    assert result["bytes"] == 5687744
    assert result["sender_bytes"] == 6223504
    assert result["retransmits"] == 2402
    assert sum(b["bytes"] for b in result["bins"]) == result["bytes"]


def test_uplink_rates_match_the_10mbit_shaper() -> None:
    result = _parse(_fixture("iperf3_uplink.json"), "uplink")
    assert 8.5e6 < result["mean_bps"] < 10e6
    # The first ~1.7 s are slow start overshooting the tbf queue, losses and recovery
    # (bins of 0 and 43 Mbit/s); from then on every 100 ms bin sits at the shaped rate.
    steady = [b["bits_per_second"] for b in result["bins"][17:-1]]
    assert len(steady) == 33
    assert all(9e6 < r < 10e6 for r in steady)
    assert all(abs(b["duration_s"] - 0.1) < 0.005 for b in result["bins"][:-1])
    assert result["bins"][-1]["duration_s"] < 0.1  # iperf3's tail interval


def test_result_metadata() -> None:
    result = _parse(_fixture("iperf3_uplink.json"), "uplink")
    assert result["direction"] == "uplink"
    assert (result["interface"], result["server"], result["port"]) == ("op0", "172.30.1.10", 5203)
    assert result["start"] == "2026-11-22T01:51:15+00:00"
    assert result["end"].startswith("2026-11-22T01:51:20.01")
    assert result["duration_s"] == pytest.approx(5.012, abs=1e-3)
    json.dumps(result)  # serialisable as is


def test_downlink_bins_come_from_the_client() -> None:
    raw = _fixture("iperf3_downlink.json")
    result = _parse(raw, "downlink")
    assert result["bins_source"] == "receiver"
    assert [b["bytes"] for b in result["bins"]] == [i["sum"]["bytes"] for i in raw["intervals"]]
    assert result["bytes"] == raw["end"]["sum_received"]["bytes"]
    assert result["sender_bytes"] == raw["end"]["sum_sent"]["bytes"]
    assert result["retransmits"] == 90


def test_rebinning_to_one_second_keeps_every_byte() -> None:
    result = _parse(_fixture("iperf3_uplink.json"), "uplink", bin_s=1.0)
    assert [round(b["t_s"]) for b in result["bins"]] == [0, 1, 2, 3, 4, 5]
    assert sum(b["bytes"] for b in result["bins"]) == result["bytes"]
    assert 9.3e6 < result["bins"][2]["bits_per_second"] < 9.7e6


def test_rebin_counts_intervals_despite_timer_drift() -> None:
    # 30 intervals whose starts drift late by 4 ms a tick: by the end a start-time
    # placement would put two intervals into one 100 ms bin.
    sums = [
        {"start": i * 0.104, "end": (i + 1) * 0.104, "bytes": 1000} for i in range(30)
    ]
    bins = tat_parse.rebin(sums, 0.1)
    assert len(bins) == 30 and all(b["bytes"] == 1000 for b in bins)
    assert len(tat_parse.rebin(sums, 0.5)) == 6


def test_uplink_without_server_json_falls_back_to_sender_bins() -> None:
    raw = copy.deepcopy(_fixture("iperf3_uplink.json"))
    del raw["server_output_json"]
    raw["server_output_text"] = "plain iperf3 -s"
    result = _parse(raw, "uplink")
    assert result["bins_source"] == "sender"
    assert len(result["bins"]) == len(raw["intervals"])


def test_iperf3_error_is_reported() -> None:
    raw = {"start": {}, "intervals": [], "end": {},
           "error": "the server is busy running a test. try again later"}
    assert tat_parse.is_busy(raw)
    with pytest.raises(tat_parse.Iperf3OutputError, match="busy"):
        _parse(raw, "uplink")


def test_a_reset_before_the_test_started_is_a_busy_server_and_after_it_a_failure() -> None:
    """A busy server's refusal can arrive as a reset of the control connection; once
    intervals were measured, a reset is the test's own failure."""
    raw = {"start": {}, "intervals": [], "end": {},
           "error": "unable to receive control message: Connection reset by peer"}
    assert tat_parse.is_busy(raw)
    started = {**raw, "intervals": [{"sum": {"start": 0, "end": 0.1, "bytes": 1000}}]}
    assert not tat_parse.is_busy(started)
    assert not tat_parse.is_busy({**raw, "error": "unable to connect to server: timeout"})


def test_unfinished_test_is_refused() -> None:
    raw = copy.deepcopy(_fixture("iperf3_downlink.json"))
    del raw["end"]["sum_received"]
    with pytest.raises(tat_parse.Iperf3OutputError, match="sum_received"):
        _parse(raw, "downlink")


def test_bad_direction() -> None:
    with pytest.raises(ValueError, match="direction"):
        _parse(_fixture("iperf3_uplink.json"), "sideways")


# /proc/net/tcp{,6} as the kernel prints them: a client in 172.30.1.21 with its control
# connection to 172.30.1.10:5201 (0x1451) and one data connection, one to another port,
# one half-open (SYN_SENT, state 02); and an IPv4-mapped IPv6 connection.
PROC_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid
   0: 15011EAC:B14D 0A011EAC:1451 01 00000000:00000000 00:00000000 00000000     0
   1: 15011EAC:B14E 0A011EAC:1451 01 00000000:00000000 00:00000000 00000000     0
   2: 15011EAC:B150 0A011EAC:1452 01 00000000:00000000 00:00000000 00000000     0
   3: 15011EAC:B151 0A011EAC:1451 02 00000000:00000000 00:00000000 00000000     0
"""
PROC_TCP6 = """\
  sl  local_address                         remote_address                        st
   0: 0000000000000000FFFF000015011EAC:B152 0000000000000000FFFF00000A011EAC:1451 01
"""


def test_established_connections_to_the_server_port_are_counted() -> None:
    assert established_to(PROC_TCP, "172.30.1.10", 5201) == 2
    assert established_to(PROC_TCP, "172.30.1.10", 5202) == 1
    assert established_to(PROC_TCP, "172.30.1.11", 5201) == 0
    assert established_to(PROC_TCP6, "172.30.1.10", 5201) == 1
    assert established_to("garbage\n 0: zz:zz 01\n", "172.30.1.10", 5201) == 0
