"""One iperf3 TCP transfer through the run's interface, against the measurement server.

``iperf3 -c <server> -B <interface address> -J --get-server-output -i 0.1``: the
server runs one iperf3 per port (5201-5208), each serving one test at a time, so the
client tries the ports in turn while they answer busy, a few rounds apart. A port whose
server accepted the control connection but started no test within
:data:`HANDSHAKE_TIMEOUT_S` is stuck (iperf3 blocks reading from a client that vanished
mid-handshake, so every later client would wait for ever on it): it is left for the
next. The report is kept as the raw output whatever happens, and turned into a
``testbed.tat`` result by :mod:`testbed_kit.tat_result`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from testbed_kit.busy import busy_rounds
from testbed_kit.connections import connections_to, server_ip
from testbed_kit.contract import ExperimentError
from testbed_kit.results import write_raw
from testbed_kit.tat_result import DIRECTIONS, iperf3_error, is_busy
from testbed_kit.watch import run_watched

#: The measurement server runs one iperf3 per port; one test per port at a time.
SERVER_PORTS = tuple(range(5201, 5209))
#: iperf3 connect timeout: a reachable server answers in well under a second, even on 3G.
CONNECT_TIMEOUT_MS = 5000
#: Head-room over the transfer for connection set-up and the server's report.
RUN_MARGIN_S = 30.0
#: A server that accepted the control connection but opened no test within this long
#: is stuck. A 3G round trip is well under a second; the handshake takes three.
HANDSHAKE_TIMEOUT_S = 8.0


class StuckServer(ExperimentError):
    """The server accepted the connection but never started the test."""


def iperf3_command(*, server: str, port: int, duration_s: float, direction: str,
                   interface_address: str | None = None,
                   interface: str | None = None) -> list[str]:
    """The client's command line: bound to the interface's address (else its device),
    downlink with ``-R`` (the server sends)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    cmd = [
        "iperf3", "-c", server, "-p", str(port),
        "-J", "--get-server-output", "-i", "0.1",
        "-t", str(float(duration_s)),
        "--connect-timeout", str(CONNECT_TIMEOUT_MS),
    ]
    if interface_address:
        cmd += ["-B", interface_address]
    elif interface:
        cmd += ["--bind-dev", interface]
    if direction == "downlink":
        cmd.append("-R")
    return cmd


def run_iperf3(cmd: list[str], timeout_s: float, *, server: str, port: int,
               handshake_s: float = HANDSHAKE_TIMEOUT_S) -> dict[str, Any]:
    """Run one iperf3 client and return its JSON report; :class:`StuckServer` when the
    test never starts, :class:`ExperimentError` when it overruns or reports nothing."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    except OSError as e:
        raise ExperimentError(f"cannot start iperf3: {e}") from e
    # control connection plus at least one data connection: the test is on
    done = run_watched(proc, timeout_s=timeout_s, start_within_s=handshake_s,
                       started=lambda: connections_to(server, port) >= 2)
    if done.killed == "timeout":
        raise ExperimentError(f"iperf3 did not finish within {timeout_s:.0f} s")
    if done.killed == "never_started":
        raise StuckServer(f"{server}:{port} accepted the connection but started no "
                          f"test within {handshake_s:.0f} s (server stuck)")
    stdout, stderr = done.stdout, done.stderr
    if stderr:
        sys.stderr.write(stderr)
    try:
        raw = json.loads(stdout)
    except ValueError as e:
        raise ExperimentError(
            f"iperf3 exited {done.returncode} without a JSON report: "
            f"{(stderr or stdout).strip()[-300:]}"
        ) from e
    if not isinstance(raw, dict):
        raise ExperimentError("iperf3 report is not a JSON object")
    return raw


def measure(*, server: str, duration_s: float, direction: str, raw_file: Path,
            interface_address: str | None = None, interface: str | None = None,
            log_prefix: str = "iperf3") -> tuple[dict[str, Any], int]:
    """One transfer against the first port that is not busy; returns (report, port).
    The report that ends it, a success or iperf3's own failure, is kept as
    ``raw_file``."""
    timeout_s = float(duration_s) + RUN_MARGIN_S
    address = server_ip(server)
    last_error = "no port tried"
    stuck: set[int] = set()
    for port in busy_rounds(SERVER_PORTS):
        if port in stuck:
            continue  # it will not recover within this run
        cmd = iperf3_command(server=server, port=port, duration_s=duration_s,
                             direction=direction, interface_address=interface_address,
                             interface=interface)
        print(f"{log_prefix}: {' '.join(cmd)}", file=sys.stderr)
        try:
            raw = run_iperf3(cmd, timeout_s, server=address, port=port)
        except StuckServer as e:
            stuck.add(port)
            last_error = str(e)
            print(f"{log_prefix}: {last_error}; trying the next port", file=sys.stderr)
            continue
        err = iperf3_error(raw)
        if err is None:
            write_raw(raw_file.parent, raw_file.name, raw)
            return raw, port
        last_error = f"{server}:{port}: {err}"
        if is_busy(raw) or "refused" in err.lower():
            print(f"{log_prefix}: {last_error}; trying the next port", file=sys.stderr)
            continue
        write_raw(raw_file.parent, raw_file.name, raw)
        raise ExperimentError(f"iperf3 failed against {last_error}")
    raise ExperimentError(f"no free iperf3 port on the measurement server ({last_error})")
