"""The agent's packet capture: tcpdump's command line and statistics (pure), and the
process handling against a stand-in tcpdump (a shell script), so no root is needed."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from node_agent.config import CaptureConfig, parse_config
from node_agent.sidecars import NodeCapture
from testbed_kit.capture import (
    CaptureStats,
    RunningCapture,
    capture_member,
    parse_tcpdump_stats,
    tcpdump_command,
)

TCPDUMP_STDERR = """\
tcpdump: listening on eth0, link-type EN10MB (Ethernet), snapshot length 96 bytes
4123 packets captured
4130 packets received by filter
7 packets dropped by kernel
"""


def test_command_line_headers_only_packet_buffered() -> None:
    cmd = tcpdump_command("op0", Path("/run/r1/capture/op0.pcap"), snaplen=96)
    assert cmd == ["tcpdump", "-i", "op0", "-s", "96", "-w", "/run/r1/capture/op0.pcap",
                   "-U", "--immediate-mode", "-n", "-Z", "root"]


def test_command_line_not_root_and_in_another_netns() -> None:
    cmd = tcpdump_command("eth0", "/x.pcap", snaplen=1500, netns_pid=4242, as_root=False)
    assert cmd[:2] == ["nsenter", "--net=/proc/4242/ns/net"]
    assert cmd[2:] == ["tcpdump", "-i", "eth0", "-s", "1500", "-w", "/x.pcap", "-U",
                       "--immediate-mode", "-n"]


def test_command_line_with_a_filter_for_the_servers_side() -> None:
    cmd = tcpdump_command("eth1", "/c/x.pcap", snaplen=96, bpf_filter=("host", "172.30.1.21"))
    assert cmd[-3:] == ["root", "host", "172.30.1.21"]


def test_command_line_rejects_bad_snaplen() -> None:
    with pytest.raises(ValueError, match="snap length"):
        tcpdump_command("op0", "/x.pcap", snaplen=0)


def test_parse_stats() -> None:
    assert parse_tcpdump_stats(TCPDUMP_STDERR) == CaptureStats(
        packets_captured=4123, packets_received_by_filter=4130, packets_dropped_by_kernel=7
    )


def test_parse_stats_singular_and_interface_drops() -> None:
    text = ("1 packet captured\n1 packet received by filter\n0 packets dropped by kernel\n"
            "3 packets dropped by interface\n")
    assert parse_tcpdump_stats(text) == CaptureStats(1, 1, 0, 3)


def test_parse_stats_absent_when_killed() -> None:
    assert parse_tcpdump_stats("tcpdump: listening on eth0, link-type EN10MB\n") is None
    assert parse_tcpdump_stats("") is None


def test_capture_member_is_under_results() -> None:
    assert capture_member("op0") == "results/capture/op0.pcap"
    assert capture_member("wwan/0") == "results/capture/wwan_0.pcap"


def test_config_defaults_and_override() -> None:
    raw = {"node_id": "n", "orchestrator_url": "http://o", "netns_container": "n",
           "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "T"},
                           "server_address": "10.0.0.1"}]}
    config = parse_config(raw, {"TESTBED_NODE_TOKEN": "t"})
    assert config.capture == CaptureConfig(enabled=True, snaplen=96, max_bytes=200_000_000)
    config = parse_config({**raw, "capture": {"snaplen": 1514, "enabled": False}},
                          {"TESTBED_NODE_TOKEN": "t"})
    assert (config.capture.enabled, config.capture.snaplen) == (False, 1514)


def _fake_tcpdump(tmp_path: Path, body: str) -> str:
    script = tmp_path / "tcpdump"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


#: As the real tcpdump: its output file is open (here: written) and its signal handler
#: set before it says it is listening, which is when the agent may stop it.
GOOD = """\
out=""; while [ $# -gt 0 ]; do [ "$1" = -w ] && out="$2"; shift; done
stats() { printf "12 packets captured\\n12 packets received by filter\\n" >&2
         printf "0 packets dropped by kernel\\n" >&2; exit 0; }
trap stats TERM
printf 'pcapdata' > "$out"
echo "tcpdump: listening on eth0, link-type EN10MB (Ethernet), snapshot length 96 bytes" >&2
while true; do sleep 0.05; done
"""


def test_start_stop_records_stats(tmp_path: Path) -> None:
    cap = RunningCapture("eth0", tmp_path / "c" / "eth0.pcap", snaplen=96, max_bytes=10**6,
                         tcpdump=_fake_tcpdump(tmp_path, GOOD))
    assert cap.start(), cap.error
    doc = cap.stop()
    assert doc["stopped_by"] == "sigterm" and doc["exit_code"] == 0
    assert doc["stats"] == {"packets_captured": 12, "packets_received_by_filter": 12,
                            "packets_dropped_by_kernel": 0, "packets_dropped_by_interface": None}
    assert doc["error"] is None and doc["bytes"] == 8
    assert cap.stop() is doc  # idempotent


def test_stops_at_max_bytes(tmp_path: Path) -> None:
    body = GOOD.replace("printf 'pcapdata'", "head -c 5000 /dev/zero")
    cap = RunningCapture("eth0", tmp_path / "eth0.pcap", snaplen=96, max_bytes=1000,
                         tcpdump=_fake_tcpdump(tmp_path, body))
    assert cap.start()
    for _ in range(50):
        if cap._at_max:
            break
        time.sleep(0.05)
    doc = cap.stop()
    assert doc["truncated_at_max_bytes"] and doc["stopped_by"] == "max_bytes"


def test_tcpdump_failing_at_once(tmp_path: Path) -> None:
    bad = _fake_tcpdump(tmp_path, 'echo "tcpdump: eth9: No such device exists" >&2; exit 1\n')
    cap = RunningCapture("eth9", tmp_path / "eth9.pcap", snaplen=96, max_bytes=10**6,
                         tcpdump=bad)
    assert not cap.start()
    assert cap.error == "tcpdump exited at once with code 1: tcpdump: eth9: No such device exists"
    assert cap.stop()["error"] == cap.error


def test_missing_tcpdump_is_noted_and_the_run_goes_on(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cap = RunningCapture("op0", run_dir / "capture" / "op0.pcap", snaplen=96, max_bytes=10,
                         tcpdump="/nonexistent/tcpdump")
    sidecar = NodeCapture("r1", "op0", cap)
    sidecar.prestart()
    assert cap.error is not None
    sidecar.exited()
    sidecar.finish(run_dir)
    doc = json.loads((run_dir / "meta" / "capture.json").read_text())
    assert doc["enabled"] and doc["file"] is None
    assert "/nonexistent/tcpdump not found on the node" in doc["error"]
    assert "packet capture: /nonexistent/tcpdump not found" in (
        run_dir / "logs" / "agent.txt").read_text()


def test_capture_moves_into_results(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cap = RunningCapture("eth0", run_dir / "capture" / "eth0.pcap", snaplen=96,
                         max_bytes=10**6, tcpdump=_fake_tcpdump(tmp_path, GOOD))
    sidecar = NodeCapture("r1", "eth0", cap)
    sidecar.prestart()
    sidecar.exited()
    sidecar.finish(run_dir)
    assert (run_dir / "results" / "capture" / "eth0.pcap").read_bytes() == b"pcapdata"
    assert not (run_dir / "capture").exists()
    doc = json.loads((run_dir / "meta" / "capture.json").read_text())
    assert doc["file"] == "results/capture/eth0.pcap" and doc["stats"]["packets_captured"] == 12
    assert not (run_dir / "logs" / "agent.txt").exists()


def test_capture_off_is_said_in_the_meta(tmp_path: Path) -> None:
    class Spec:
        run_id, interface = "r1", "op0"

    sidecar = NodeCapture.for_run(
        Spec(), tmp_path,  # type: ignore[arg-type]
        config=CaptureConfig(enabled=False), netns_pid=None)
    sidecar.prestart()
    sidecar.exited()
    sidecar.finish(tmp_path)
    assert json.loads((tmp_path / "meta" / "capture.json").read_text()) == {
        "format": "testbed.capture", "version": 1, "enabled": False, "interface": "op0",
        "file": None}


def test_the_experiments_own_file_of_that_name_is_kept(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "results" / "capture").mkdir(parents=True)
    (run_dir / "results" / "capture" / "eth0.pcap").write_bytes(b"experiment's")
    cap = RunningCapture("eth0", run_dir / "capture" / "eth0.pcap", snaplen=96,
                         max_bytes=10**6, tcpdump=_fake_tcpdump(tmp_path, GOOD))
    sidecar = NodeCapture("r1", "eth0", cap)
    sidecar.prestart()
    sidecar.exited()
    sidecar.finish(run_dir)
    assert (run_dir / "results" / "capture" / "eth0.pcap").read_bytes() == b"experiment's"
    assert (run_dir / "results" / "capture" / "eth0.agent.pcap").read_bytes() == b"pcapdata"
    doc = json.loads((run_dir / "meta" / "capture.json").read_text())
    assert doc["file"] == "results/capture/eth0.agent.pcap"
