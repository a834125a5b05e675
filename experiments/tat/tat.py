"""TAT experiment entry point: one iperf3 TCP transfer through the run's interface.

Reads the run configuration (experiment contract: /testbed/config.json, environment),
runs ``iperf3 -c <server> -B <interface address> -J --get-server-output -i 0.1``, trying
the server's ports 5201..5208 in turn while they answer busy, and writes
``/results/tat.json`` (format testbed.tat v1, parsed by :mod:`tat_parse`) next to
iperf3's raw report ``/results/iperf3.json``. On failure it exits non-zero with the
reason as the last line of stderr, which the agent copies into the run's final state.
Standard library only, so the image needs nothing but python3 and iperf3.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tat_parse import Iperf3OutputError, established_to, iperf3_error, is_busy, parse_iperf3

#: The measurement server runs one iperf3 per port; one test per port at a time.
SERVER_PORTS = tuple(range(5201, 5209))
#: Rounds over all ports while every one answers busy, and the pause between rounds.
BUSY_ROUNDS = 3
BUSY_PAUSE_S = 2.0
#: iperf3 connect timeout: a reachable server answers in well under a second, even on 3G.
CONNECT_TIMEOUT_MS = 5000
#: Head-room over the transfer for connection set-up and the server's report.
RUN_MARGIN_S = 30.0
#: A server that accepted the control connection but opened no test within this long
#: is stuck: iperf3 serves one client at a time and blocks reading from a client that
#: vanished mid-handshake (a node that lost its link), so every later client waits
#: for ever on that port. Give up on the port and try the next. A 3G round trip is
#: well under a second; the handshake takes three.
HANDSHAKE_TIMEOUT_S = 8.0
#: Where the kernel lists the namespace's TCP connections.
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")

DEFAULTS: dict[str, Any] = {"duration_s": 10, "direction": "uplink", "bin_s": 0.1}


class ExperimentError(Exception):
    """A failure to report as the run's reason (last stderr line)."""


class StuckServer(ExperimentError):
    """The server accepted the connection but never started the test."""


def load_config() -> dict[str, Any]:
    path = Path(os.environ.get("TESTBED_CONFIG", "/testbed/config.json"))
    config: dict[str, Any] = {}
    if path.exists():
        try:
            config = json.loads(path.read_text())
        except ValueError as e:
            raise ExperimentError(f"run configuration {path} is not valid JSON: {e}") from e
    env = os.environ
    config.setdefault("interface", env.get("TESTBED_INTERFACE"))
    config.setdefault("interface_address", env.get("TESTBED_INTERFACE_ADDRESS"))
    config.setdefault("server_address", env.get("TESTBED_SERVER"))
    params = {**DEFAULTS, **config.get("parameters", {})}
    for name in DEFAULTS:
        value = env.get(f"TESTBED_PARAM_{name.upper()}")
        if value is not None and name not in config.get("parameters", {}):
            params[name] = value
    config["parameters"] = params
    if not config.get("server_address"):
        raise ExperimentError(
            "no measurement server given (config server_address / TESTBED_SERVER)"
        )
    return config


def iperf3_command(config: dict[str, Any], port: int) -> list[str]:
    params = config["parameters"]
    cmd = [
        "iperf3", "-c", str(config["server_address"]), "-p", str(port),
        "-J", "--get-server-output", "-i", "0.1",
        "-t", str(float(params["duration_s"])),
        "--connect-timeout", str(CONNECT_TIMEOUT_MS),
    ]
    if config.get("interface_address"):
        cmd += ["-B", str(config["interface_address"])]
    elif config.get("interface"):
        cmd += ["--bind-dev", str(config["interface"])]
    if params["direction"] == "downlink":
        cmd.append("-R")
    return cmd


def server_ip(server: str) -> str:
    """The server's address as the kernel's tables show it (names are resolved)."""
    try:
        return socket.gethostbyname(server)
    except OSError as e:
        raise ExperimentError(f"cannot resolve the measurement server {server!r}: {e}") from e


def connections_to(server: str, port: int) -> int:
    """Established connections from this network namespace to ``server:port``."""
    count = 0
    for table in TCP_TABLES:
        try:
            count += established_to(Path(table).read_text(), server, port)
        except OSError:
            continue  # no IPv6 in the namespace
    return count


@dataclass(frozen=True)
class Watched:
    """How a watched client process ended: its output, and why it was killed (None:
    it exited on its own, with ``returncode``)."""

    returncode: int
    stdout: str
    stderr: str
    killed: Literal["never_started", "timeout"] | None


def run_watched(proc: subprocess.Popen[str], *, timeout_s: float, started: Callable[[], bool],
                start_within_s: float) -> Watched:
    """Wait for a measurement client, killing it when it runs past ``timeout_s`` or when
    ``started`` (e.g. its connections to the server are up) has not been seen within
    ``start_within_s``: a server that accepted and then went silent, or never
    answered, must end the step with a reason, not hang it."""
    begun = time.monotonic()
    seen = False
    while True:
        try:
            stdout, stderr = proc.communicate(timeout=0.2)
            return Watched(proc.returncode, stdout or "", stderr or "", None)
        except subprocess.TimeoutExpired:
            pass
        elapsed = time.monotonic() - begun
        seen = seen or started()
        if elapsed > timeout_s or (not seen and elapsed > start_within_s):
            proc.kill()
            stdout, stderr = proc.communicate()
            return Watched(proc.returncode, stdout or "", stderr or "",
                           "timeout" if seen else "never_started")


def run_iperf3(cmd: list[str], timeout_s: float, *, server: str, port: int,
               handshake_s: float = HANDSHAKE_TIMEOUT_S) -> dict[str, Any]:
    """Run one iperf3 client; :class:`StuckServer` when the test never starts."""
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


def measure(config: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Run iperf3 against the first port that is not busy; returns (raw report, port)."""
    timeout_s = float(config["parameters"]["duration_s"]) + RUN_MARGIN_S
    server = server_ip(str(config["server_address"]))
    last_error = "no port tried"
    stuck: set[int] = set()
    for round_no in range(BUSY_ROUNDS):
        if round_no:
            time.sleep(BUSY_PAUSE_S)
        for port in SERVER_PORTS:
            if port in stuck:
                continue  # it will not recover within this run
            cmd = iperf3_command(config, port)
            print(f"tat: {' '.join(cmd)}", file=sys.stderr)
            try:
                raw = run_iperf3(cmd, timeout_s, server=server, port=port)
            except StuckServer as e:
                stuck.add(port)
                last_error = str(e)
                print(f"tat: {last_error}; trying the next port", file=sys.stderr)
                continue
            err = iperf3_error(raw)
            if err is None:
                return raw, port
            last_error = f"{config['server_address']}:{port}: {err}"
            if is_busy(raw) or "refused" in err.lower():
                print(f"tat: {last_error}; trying the next port", file=sys.stderr)
                continue
            Path(results_dir(), "iperf3.json").write_text(json.dumps(raw, indent=1))
            raise ExperimentError(f"iperf3 failed against {last_error}")
    raise ExperimentError(f"no free iperf3 port on the measurement server ({last_error})")


def results_dir() -> Path:
    return Path(os.environ.get("TESTBED_RESULTS", "/results"))


def main() -> int:
    try:
        out = results_dir()
        out.mkdir(parents=True, exist_ok=True)
        config = load_config()
        params = config["parameters"]
        raw, port = measure(config)
        (out / "iperf3.json").write_text(json.dumps(raw, indent=1))
        result = parse_iperf3(
            raw,
            direction=str(params["direction"]),
            interface=str(config.get("interface") or ""),
            server=str(config["server_address"]),
            port=port,
            bin_s=float(params["bin_s"]),
        )
        (out / "tat.json").write_text(json.dumps(result, indent=1))
    except (ExperimentError, Iperf3OutputError, ValueError, OSError) as e:
        print(f"tat failed: {e}", file=sys.stderr)
        return 1
    print(
        f"tat: {result['direction']} {result['mean_bps'] / 1e6:.2f} Mbit/s receiver mean, "
        f"{result['bytes']} bytes in {result['duration_s']:.1f} s, {len(result['bins'])} bins",
        file=sys.stderr,
    )
    print(json.dumps({k: result[k] for k in ("direction", "mean_bps", "bytes", "port")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
