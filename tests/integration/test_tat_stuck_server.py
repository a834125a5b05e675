"""The tat experiment and the server's watchdog against an iperf3 port that is stuck.

iperf3 serves one client at a time and blocks reading from a client that vanished in
the middle of its handshake (a node whose link dropped), so every later client of that
port waits for ever. Real iperf3 servers in a network namespace: port 5201 made stuck
by such a client, port 5202 healthy; the experiment, run as its image runs it (tat.py
in the client's namespace), must give up on 5201 and measure on 5202 in bounded time;
the server's watchdog must kill the stuck server and leave a busy one alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, require_root, require_tools

pytestmark = [pytest.mark.netns, pytest.mark.quiet]  # done within 20 s

TAG = uuid.uuid4().hex[:6]
SERVER_NS, CLIENT_NS, GHOST_NS = f"tbs-{TAG}", f"tbc-{TAG}", f"tbg-{TAG}"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _in(ns: str, *cmd: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


@pytest.fixture()
def topology() -> Iterator[list[subprocess.Popen[bytes]]]:
    require_root("network namespaces (ip netns)")
    require_tools("ip", "iperf3")
    servers: list[subprocess.Popen[bytes]] = []
    try:
        for ns in (SERVER_NS, CLIENT_NS, GHOST_NS):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", f"s1{TAG}", "netns", SERVER_NS, "type", "veth", "peer",
            "name", f"c1{TAG}", "netns", CLIENT_NS)
        _ip("link", "add", f"s2{TAG}", "netns", SERVER_NS, "type", "veth", "peer",
            "name", f"g1{TAG}", "netns", GHOST_NS)
        for ns, dev, addr in ((SERVER_NS, f"s1{TAG}", "10.95.1.1/24"),
                              (CLIENT_NS, f"c1{TAG}", "10.95.1.2/24"),
                              (SERVER_NS, f"s2{TAG}", "10.95.2.1/24"),
                              (GHOST_NS, f"g1{TAG}", "10.95.2.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        for port in ("5201", "5202"):  # as the measurement server runs them
            servers.append(subprocess.Popen(
                _in(SERVER_NS, "iperf3", "-s", "-p", port, "-J", "-i", "0.1",
                    "--idle-timeout", "120"),
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)
        # The ghost: connects to 5201, loses its link, then says its cookie (never heard).
        ghost = ("import socket, subprocess\n"
                 "s = socket.create_connection(('10.95.2.1', 5201), timeout=5)\n"
                 f"subprocess.run(['ip', 'link', 'set', 'g1{TAG}', 'down'], check=True)\n"
                 "s.send(b'x' * 36 + b'\\0')\n")
        subprocess.run(_in(GHOST_NS, sys.executable, "-c", ghost), check=True, timeout=10)
        yield servers
    finally:
        for p in servers:
            p.kill()
            p.wait()
        for ns in (SERVER_NS, CLIENT_NS, GHOST_NS):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_a_stuck_port_is_left_for_the_next(
    topology: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "interface": f"c1{TAG}", "interface_address": "10.95.1.2",
        "server_address": "10.95.1.1", "parameters": {"duration_s": 2}}))
    results = tmp_path / "results"
    started = time.monotonic()
    proc = subprocess.run(
        _in(CLIENT_NS, sys.executable, str(REPO / "experiments/tat/tat.py")),
        env={**os.environ, "TESTBED_CONFIG": str(config), "TESTBED_RESULTS": str(results),
             "PYTHONPATH": str(REPO / "common")},  # the kit, as the image has it
        capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert "10.95.1.1:5201 accepted the connection but started no test" in proc.stderr
    result = json.loads((results / "tat.json").read_text())
    assert result["port"] == 5202
    assert result["mean_bps"] > 0 and len(result["bins"]) >= 15
    # the handshake timeout (8 s) plus a 2 s test, not the 32 s transfer timeout
    assert took < 20, (took, proc.stderr)


def test_the_watchdog_kills_the_stuck_server_and_spares_a_busy_one(
    topology: list[subprocess.Popen[bytes]],
) -> None:
    stuck, healthy = topology
    watchdog = subprocess.Popen(
        _in(SERVER_NS, sys.executable, str(REPO / "server-image/iperf3_watchdog.py"),
            "--stuck-s", "3", "--interval-s", "0.5"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # A 6 s test on the healthy port, twice the watchdog's patience: bytes flow.
        client = subprocess.run(
            _in(CLIENT_NS, "iperf3", "-c", "10.95.1.1", "-p", "5202", "-t", "6", "-J"),
            capture_output=True, text=True, timeout=30)
        assert json.loads(client.stdout).get("error") is None, client.stdout[-500:]
        assert stuck.wait(timeout=10) == -9  # SIGKILL, within the watchdog's 3 s
        assert healthy.poll() is None
    finally:
        watchdog.kill()
        _, err = watchdog.communicate()
    assert f"iperf3 server {stuck.pid} held a connection" in err, err
    assert str(healthy.pid) not in err
