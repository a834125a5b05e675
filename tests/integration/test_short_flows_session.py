"""The short-flows session against the real flow responder over a real netns link.

A server namespace runs server-image/flow_responder.py; the session runs in a client
namespace as its image runs it (session.py with the experiment kit on the path), with
tcpdump on the client's interface as the node agent takes it. The link is a veth whose
server side is shaped with tbf (this kernel has no netem): downlink flows meet the
bottleneck, uplink ones do not. The result is joined with the capture's flows exactly
as ingest does (the reference analysis, :mod:`studies.short_flows.points`):
every flow is found in the capture, none is excluded on a clean link, and the long
flow's completion time from the capture gives the shaped rate.

``TESTBED_RECORD_SHORT_FLOWS=DIR`` keeps a downlink run's result and capture in DIR:
how tests/unit/fixtures/short-flows-* were recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.capture import reference_flows
from studies.short_flows.points import flow_rows
from testbed_kit.short_flows import parse_result, short_sizes
from tests.conftest import REPO, require_root, require_tools

pytestmark = pytest.mark.netns

TAG = uuid.uuid4().hex[:6]
SERVER_NS, CLIENT_NS = f"sfs-{TAG}", f"sfc-{TAG}"
S_DEV, C_DEV = f"fs{TAG}", f"fc{TAG}"
SERVER, CLIENT = "10.98.1.1", "10.98.1.2"
RATE_BPS = 8_000_000  # the downlink bottleneck (tbf on the server's side)
LONG_BYTES = 1_000_000


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _in(ns: str, *cmd: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


@pytest.fixture(scope="module")
def link() -> Iterator[subprocess.Popen[bytes]]:
    """The two namespaces, the shaped link and the responder; removed at the end."""
    require_root("network namespaces")
    require_tools("ip", "tc", "tcpdump")
    responder = None
    try:
        for ns in (SERVER_NS, CLIENT_NS):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            subprocess.run(_in(ns, "sysctl", "-qw", "net.ipv4.tcp_no_metrics_save=1"),
                           check=True)
        _ip("link", "add", S_DEV, "netns", SERVER_NS, "type", "veth", "peer", "name", C_DEV,
            "netns", CLIENT_NS)
        _ip("-n", SERVER_NS, "addr", "add", f"{SERVER}/24", "dev", S_DEV)
        _ip("-n", CLIENT_NS, "addr", "add", f"{CLIENT}/24", "dev", C_DEV)
        for ns, dev in ((SERVER_NS, S_DEV), (CLIENT_NS, C_DEV)):
            _ip("-n", ns, "link", "set", dev, "up")
            # No segmentation offload on the capture path: the capture sees wire segments.
            subprocess.run(_in(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro",
                               "off"), capture_output=True)
        subprocess.run(_in(SERVER_NS, "tc", "qdisc", "add", "dev", S_DEV, "root", "tbf",
                           "rate", f"{RATE_BPS}bit", "burst", "32kbit", "latency", "50ms"),
                       check=True)
        env = {**os.environ, "PYTHONPATH": str(REPO / "common")}
        responder = subprocess.Popen(
            _in(SERVER_NS, sys.executable, str(REPO / "server-image/flow_responder.py"),
                "--listen", SERVER), env=env, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while subprocess.run(_in(CLIENT_NS, sys.executable, "-c",
                                 f"import socket; socket.create_connection(('{SERVER}', 5301), 1)"),
                             capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "the flow responder did not start"
            time.sleep(0.2)
        yield responder
    finally:
        if responder is not None:
            responder.send_signal(signal.SIGTERM)
            responder.wait(5)
        for ns in (SERVER_NS, CLIENT_NS):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def run_session(tmp: Path, **params: Any) -> tuple[dict[str, Any], bytes, str]:
    """One session in the client namespace with its capture: (result, pcap, stderr)."""
    results = tmp / "results"
    results.mkdir()
    config = tmp / "config.json"
    config.write_text(json.dumps({"parameters": params, "interface": C_DEV,
                                  "interface_address": CLIENT, "server_address": SERVER}))
    pcap = tmp / "capture.pcap"
    dump = subprocess.Popen(_in(CLIENT_NS, "tcpdump", "-i", C_DEV, "-s", "96", "-U",
                                "--immediate-mode", "-w", str(pcap), "tcp"),
                            stderr=subprocess.DEVNULL)
    time.sleep(1)  # tcpdump is listening
    env = {**os.environ, "PYTHONPATH": str(REPO / "common"), "TESTBED_CONFIG": str(config),
           "TESTBED_RESULTS": str(results)}
    done = subprocess.run(_in(CLIENT_NS, sys.executable,
                              str(REPO / "experiments/short-flows/session.py")),
                          env=env, capture_output=True, text=True, timeout=120)
    time.sleep(0.5)  # the last FIN/ACKs
    dump.send_signal(signal.SIGINT)
    dump.wait(5)
    assert done.returncode == 0, done.stderr
    result = json.loads((results / "short-flows.json").read_text())
    if params.get("direction") == "downlink" and (keep := os.environ.get(
            "TESTBED_RECORD_SHORT_FLOWS")):
        shutil.copy(results / "short-flows.json", Path(keep) / "short-flows-downlink.json")
        shutil.copy(pcap, Path(keep) / "short-flows-downlink.pcap")
    return result, pcap.read_bytes(), done.stderr


@pytest.mark.parametrize("direction", ["downlink", "uplink"])
def test_every_flow_is_found_in_the_capture_with_its_completion_time(
        link: subprocess.Popen[bytes], tmp_path: Path, direction: str) -> None:
    result, pcap, stderr = run_session(tmp_path, direction=direction, long_bytes=LONG_BYTES,
                                       gap_s=0.2)
    parsed = parse_result(result)
    assert [f.size_bytes for f in parsed.flows] == [*short_sizes(), LONG_BYTES]
    assert parsed.settings["tcp_no_metrics_save"] == "1"
    assert parsed.settings["tcp_sack"] == "1"
    rows = flow_rows(parsed, reference_flows(pcap).flows)
    assert [r.fields["status"] for r in rows] == ["ok"] * 12, (rows, stderr)
    for row, rec in zip(rows, parsed.flows, strict=True):
        fct, rtt = row.fields["fct_s"], row.fields["rtt_3whs_s"]
        assert isinstance(fct, float) and isinstance(rtt, float), row
        # From the first SYN: the handshake is part of it, and the tool's own timer
        # (which starts at connect()) sees about the same span.
        assert fct > rtt > 0, row
        assert rec.tool_s is not None and abs(fct - rec.tool_s) < 0.05 + 0.2 * fct, (row, rec)
    long = rows[-1]
    rate = LONG_BYTES * 8 / float(long.fields["fct_s"] or 0)
    if direction == "downlink":  # through the tbf: the shaped rate, give or take
        assert 0.6 * RATE_BPS < rate < 1.05 * RATE_BPS, rate
    else:  # unshaped veth: far faster than the bottleneck the other way
        assert rate > 2 * RATE_BPS, rate


def test_the_responder_refuses_a_bad_request_with_a_reason(
        link: subprocess.Popen[bytes]) -> None:
    probe = (f"import socket; s = socket.create_connection(('{SERVER}', 5301), 5); "
             "s.sendall(b'down 0\\n'); print(s.recv(200).decode())")
    out = subprocess.run(_in(CLIENT_NS, sys.executable, "-c", probe), capture_output=True,
                         text=True, timeout=20)
    assert out.stdout.startswith("error: a flow moves 1 to"), out
