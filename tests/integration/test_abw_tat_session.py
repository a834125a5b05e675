"""The abw-tat session against real servers in network namespaces, good input and bad.

A server namespace runs what the measurement server runs (iperf3 -J -i 0.1, ``abw
recv`` built from tools/, D-ITG's ITGRecv with server-image/ditg_logs.py; once the real
server-image/testbed-server.sh); the session runs in a client namespace as its image
runs it (session.py, with its folder and the experiment kit on the path). Bad input
must end the session in bounded time with a non-zero exit, the reason as the last
stderr line, and a result that records the failed step with its error: a receiver
that does not exist, a link slower than the estimator's smallest probing rate (a tbf
of a few kbit/s), and a control connection lost mid-step (the server's process
killed, or the link silenced by an nftables drop), for the ABw, iperf3 and D-ITG
steps.

The abw binary: $TESTBED_ABW_BIN, else tools/target/release/abw, else build/bin/abw,
else on PATH (scripts/test builds it before the tests).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, require_root, require_tools, unavailable

pytestmark = [pytest.mark.netns, pytest.mark.quiet]  # deadlines of a few seconds

TAG = uuid.uuid4().hex[:6]
SERVER_NS, CLIENT_NS = f"tas-{TAG}", f"tac-{TAG}"
S_DEV, C_DEV = f"as{TAG}", f"ac{TAG}"
SERVER, CLIENT = "10.97.1.1", "10.97.1.2"
NOBODY = "10.97.1.77"  # on the link, answered by no one
#: The experiment kit, which the image copies beside the session's own modules.
PYTHONPATH = str(REPO / "common")


def abw_binary() -> str | None:
    for candidate in (os.environ.get("TESTBED_ABW_BIN"),
                      str(REPO / "tools/target/release/abw"), str(REPO / "build/bin/abw")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("abw")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _in(ns: str, *cmd: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


class Servers:
    """The measurement server's processes in their namespace; stopped at the end."""

    def __init__(self, abw: str, ditg_dir: Path) -> None:
        self.abw = abw
        self.ditg_dir = ditg_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, *names: str) -> None:
        commands = {
            "iperf3": ["iperf3", "-s", "-p", "5201", "-J", "-i", "0.1",
                       "--idle-timeout", "60"],
            "abw": [self.abw, "recv", "--listen", "0.0.0.0:7351"],
            "itgrecv": ["ITGRecv", "-Sp", "9000"],
            "logs": [sys.executable, str(REPO / "server-image/ditg_logs.py"),
                     "--dir", str(self.ditg_dir), "--settle-s", "0.5"],
        }
        for name in names:
            self.procs[name] = subprocess.Popen(
                _in(SERVER_NS, *commands[name]), cwd=self.ditg_dir,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
        time.sleep(0.5)

    def stop(self) -> None:
        for p in self.procs.values():
            p.kill()
            p.wait()


@pytest.fixture()
def servers() -> Iterator[Servers]:
    abw = abw_binary()
    require_root("network namespaces (ip netns)")
    require_tools("ip", "iperf3", "ITGSend", "ITGRecv", "ITGDec", "tc")
    if abw is None:
        unavailable("needs the abw binary (cd tools && cargo build --release)")
    ditg_dir = Path(tempfile.mkdtemp(prefix="tb-ditg-"))
    s = Servers(abw, ditg_dir)
    try:
        for ns in (SERVER_NS, CLIENT_NS):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", S_DEV, "netns", SERVER_NS, "type", "veth", "peer",
            "name", C_DEV, "netns", CLIENT_NS)
        for ns, dev, addr in ((SERVER_NS, S_DEV, f"{SERVER}/24"),
                              (CLIENT_NS, C_DEV, f"{CLIENT}/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        yield s
    finally:
        s.stop()
        for ns in (SERVER_NS, CLIENT_NS):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(ditg_dir, ignore_errors=True)


PARAMS: dict[str, Any] = {
    "run_s": 2, "estimates": 1, "pause_s": 0, "halves": 1, "repetitions": 1,
    "method1": "yaz", "method2": "yaz", "direction": "uplink", "probe_size": 1400,
    "capacity_bps": 0, "tat_tool": "iperf3",
}


def start_session(tmp: Path, abw: str, server: str = SERVER,
                  **params: Any) -> tuple[subprocess.Popen[str], Path]:
    config = tmp / "config.json"
    config.write_text(json.dumps({
        "interface": C_DEV, "interface_address": CLIENT, "server_address": server,
        "parameters": {**PARAMS, **params}}))
    results = tmp / "results"
    env = {**os.environ, "TESTBED_CONFIG": str(config), "TESTBED_RESULTS": str(results),
           "PYTHONPATH": PYTHONPATH,
           "PATH": f"{Path(abw).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(
        _in(CLIENT_NS, sys.executable, str(REPO / "experiments/abw-tat/session.py")),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, results


def finish(proc: subprocess.Popen[str], within_s: float) -> tuple[int, str, float]:
    started = time.monotonic()
    try:
        _, err = proc.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the session hung (> {within_s} s): {err[-2000:]}")
    return proc.returncode, err, time.monotonic() - started


def failed_as(results: Path, err: str, kind: str, needle: str) -> dict[str, Any]:
    """The run's reason (last stderr line) and the result's error name the failed step
    and ``needle`` (a regular expression); the failed step is in the steps with its
    error and counters."""
    reason = err.strip().splitlines()[-1]
    assert reason.startswith("abw-tat failed: "), err
    assert re.search(needle, reason), err
    doc: dict[str, Any] = json.loads((results / "abw-tat.json").read_text())
    assert "summary" not in doc and re.search(needle, doc["error"]), doc
    last = doc["steps"][-1]
    assert last["kind"] == kind and re.search(needle, last["error"]), doc["steps"]
    assert {"start", "end", "iface_rx_bytes", "iface_tx_bytes"} <= last.keys()
    return doc


def test_ditg_session_gives_receiver_bins_like_iperf3(servers: Servers, tmp_path: Path) -> None:
    servers.start("abw", "itgrecv", "logs")
    proc, results = start_session(tmp_path, servers.abw, tat_tool="ditg")
    code, err, _ = finish(proc, 90)
    assert code == 0, err
    doc = json.loads((results / "abw-tat.json").read_text())
    assert [s["kind"] for s in doc["steps"]] == ["abw", "tat", "abw"], doc
    tat_step = doc["steps"][1]
    assert tat_step["tool"] == "ditg" and tat_step["iface_tx_bytes"] > 0
    assert {"ditg-1-bitrate.txt", "ditg-1-recv.log", "ditg-1-recv.txt", "ditg-1-send.log",
            "ditg-1-itgsend.txt"} <= set(tat_step["raw"])
    tat = json.loads((results / "tat-1.json").read_text())
    assert tat["format"] == "testbed.tat" and tat["tool"] == "ditg"
    assert tat["bins_source"] == "receiver" and len(tat["bins"]) >= 18
    assert tat["mean_bps"] > 1e6 and tat["bytes"] <= tat["sender_bytes"]
    assert sum(b["bytes"] for b in tat["bins"]) == tat["bytes"]
    assert doc["summary"]["tat_mean_bps"] == pytest.approx(tat["mean_bps"])


def test_unreachable_receiver_ends_the_session_at_once(
    servers: Servers, tmp_path: Path
) -> None:
    proc, results = start_session(tmp_path, servers.abw, server=NOBODY)
    code, err, took = finish(proc, 60)
    assert code != 0
    failed_as(results, err, "abw", "abw yaz failed")
    assert took < 30, (took, err)


@pytest.mark.parametrize(("silent", "needle"), [
    (False, "Connection refused"),
    (True, "did not answer within 8 s"),
])
def test_unreachable_ditg_receiver_is_an_error_not_a_hang(
    servers: Servers, tmp_path: Path, silent: bool, needle: str
) -> None:
    servers.start("abw")  # ABw answers; ITGRecv does not
    if silent:  # the signalling port's packets vanish: no refusal, no answer at all
        require_tools("nft")
        _ip("netns", "exec", SERVER_NS, "nft", "add table inet t; "
            "add chain inet t in { type filter hook input priority 0; }; "
            "add rule inet t in tcp dport 9000 drop")
    proc, results = start_session(tmp_path, servers.abw, tat_tool="ditg")
    code, err, took = finish(proc, 60)
    assert code != 0
    failed_as(results, err, "tat", needle)
    assert took < 30, (took, err)


def test_the_server_script_serves_ditg_as_nobody(servers: Servers, tmp_path: Path) -> None:
    """server-image/testbed-server.sh itself: ITGRecv (unprivileged, in its directory)
    and the log service answer a D-ITG session next to iperf3 and abw."""
    env = {**os.environ, "TESTBED_IPERF3_PORTS": "5201-5201", "TESTBED_ABW_RECEIVERS": "1",
           "TESTBED_DITG_DIR": str(servers.ditg_dir / "logs"),
           "TESTBED_DITG_LOGS": str(REPO / "server-image/ditg_logs.py"),
           "TESTBED_IPERF3_WATCHDOG": str(REPO / "server-image/iperf3_watchdog.py"),
           "PATH": f"{Path(servers.abw).parent}{os.pathsep}{os.environ['PATH']}"}
    script = subprocess.Popen(_in(SERVER_NS, str(REPO / "server-image/testbed-server.sh")),
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        time.sleep(1.5)
        proc, results = start_session(tmp_path, servers.abw, tat_tool="ditg")
        code, err, _ = finish(proc, 90)
        assert code == 0, err
        assert len(json.loads((results / "tat-1.json").read_text())["bins"]) >= 18
        logs = list((servers.ditg_dir / "logs").glob("tbtat-*.log"))
        assert len(logs) == 1 and logs[0].stat().st_uid == pwd.getpwnam("nobody").pw_uid
    finally:
        os.killpg(script.pid, signal.SIGTERM)  # the script stops its whole group
        _, server_err = script.communicate(timeout=20)
    assert "ITGRecv on port 9000, its receiver logs on http port 9009" in server_err


def test_a_link_too_slow_for_the_smallest_probe_rate(servers: Servers, tmp_path: Path) -> None:
    servers.start("iperf3", "abw")
    # uplink bottleneck of 16 kbit/s, far under abw's smallest probing rate (100 kbit/s)
    _ip("netns", "exec", CLIENT_NS, "tc", "qdisc", "replace", "dev", C_DEV, "root", "tbf",
        "rate", "16kbit", "burst", "3028", "latency", "400ms")
    proc, results = start_session(tmp_path, servers.abw)
    code, err, took = finish(proc, 120)
    assert code != 0
    doc = failed_as(results, err, "abw", "abw yaz failed")
    assert "slow" in doc["error"], doc["error"]
    assert took < 90, (took, err)


def _cut_link() -> None:
    """The server stops hearing the node: no reset, no refusal, silence."""
    _ip("netns", "exec", SERVER_NS, "nft", "add table inet cut; "
        "add chain inet cut in { type filter hook input priority 0; }; "
        "add rule inet cut in iifname != lo drop")


@pytest.mark.parametrize(("tool", "lose", "kind", "needle", "within_s"), [
    # killed mid-estimate (connection reset) or between two (the next one is refused)
    ("iperf3", "abw", "abw", "control connection lost|receiver unreachable", 30),
    ("iperf3", "iperf3", "tat", "iperf3 failed against 10.97.1.1:5201", 30),
    ("ditg", "itgrecv", "tat", "the connection to ITGRecv was lost", 30),
    ("iperf3", "cut", "abw", "control connection lost", 40),  # reply timeout (10 s)
    ("ditg", "cut", "tat", "did not finish within 40 s", 70),  # run_s + 30 s
])
def test_lost_control_connection_ends_the_session_with_the_reason(
    servers: Servers, tmp_path: Path, tool: str, lose: str, kind: str, needle: str,
    within_s: float,
) -> None:
    """The server's process dies (the connection is reset) or the link goes silent, in
    the middle of an ABw step of 10 estimates (~10 s) or of a 10 s TAT."""
    if lose == "cut":
        require_tools("nft")
    servers.start("abw", "iperf3", "itgrecv", "logs")
    proc, results = start_session(tmp_path, servers.abw, tat_tool=tool, estimates=10,
                                  run_s=10)
    deadline = time.monotonic() + 40
    while kind == "tat" and not list(results.glob("abw-0-*.jsonl")):
        assert time.monotonic() < deadline and proc.poll() is None, "no ABw step ran"
        time.sleep(0.2)
    time.sleep(2.0 if kind == "tat" else 3.5)
    started = time.monotonic()
    if lose == "cut":
        _cut_link()
    else:
        servers.procs[lose].send_signal(signal.SIGKILL)
    code, err, _ = finish(proc, within_s + 30)
    took = time.monotonic() - started
    assert code != 0
    failed_as(results, err, kind, needle)
    assert took < within_s, (took, err)
