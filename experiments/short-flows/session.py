"""short-flows entry point: 11 short flows and one long flow, each on a fresh connection.

The protocol, after Garcia et al.'s time-of-day study of Swedish 3.5G/4G networks:

1. read back the TCP settings the flows run with (initial window 10, SACK on, no
   metrics caching; the node and the server set ``tcp_no_metrics_save``), and record
   them in the result;
2. for each of the 11 sizes from 1,388 to 327,568 bytes, smallest first, then the long
   flow (``long_bytes``): open a new TCP connection to the server's flow responder,
   ask it to send (downlink) or to receive (uplink) that many bytes, move them, close;
   wait ``gap_s`` so that no two connections overlap in the capture;
3. write ``short-flows.json`` (format ``testbed.short-flows`` v1,
   :mod:`testbed_kit.short_flows`): each flow's size, kind, local port and the
   client's own timer.

The completion times are not measured here: the node agent captures the run's
interface and ingest takes each flow's completion time (first SYN to the last data
byte ACKed), handshake RTT and retransmissions from that capture, matching the
connection by its local port. A flow that fails is recorded with its error; the run
fails only when no flow completed.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testbed_kit.contract import ExperimentError, load_config, results_dir, run_experiment
from testbed_kit.results import write_result
from testbed_kit.short_flows import (
    FORMAT,
    RESPONDER_PORT,
    VERSION,
    request_line,
    short_sizes,
)

DEFAULTS: dict[str, Any] = {"direction": "downlink", "long_bytes": 20 * 1024 * 1024,
                            "gap_s": 1.0, "flow_timeout_s": 60.0}
#: Linux's initial congestion window since 2.6.39 (RFC 6928: 10 segments) unless a
#: route says otherwise (``initcwnd``).
DEFAULT_INITCWND = 10
CHUNK = 64 * 1024
SYSCTLS = ("tcp_sack", "tcp_no_metrics_save", "tcp_congestion_control")


def tcp_settings(server: str) -> dict[str, str]:
    """The settings each flow runs with, as the kernel reports them (recorded, so a
    node that could not set them is seen in the data)."""
    out: dict[str, str] = {}
    for name in SYSCTLS:
        try:
            out[name] = Path(f"/proc/sys/net/ipv4/{name}").read_text().strip()
        except OSError:
            out[name] = "unknown"
    out["initcwnd"] = str(DEFAULT_INITCWND)
    del server  # the route's initcwnd would need ip(8); the fleet's routes set none
    return out


def one_flow(*, server: str, direction: str, size: int, bind: str | None,
             timeout_s: float) -> tuple[int, float, int]:
    """One flow on a new connection: (local port, client-timed seconds from connect()
    to the last byte, bytes moved). Raises OSError when it fails."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        if bind:
            s.bind((bind, 0))
        begun = time.monotonic()
        s.connect((server, RESPONDER_PORT))
        port = int(s.getsockname()[1])
        s.sendall(request_line(direction, size))
        moved = 0
        if direction == "downlink":
            while chunk := s.recv(CHUNK):
                moved += len(chunk)
            took = time.monotonic() - begun
        else:
            block = b"\0" * CHUNK
            while moved < size:
                n = min(CHUNK, size - moved)
                s.sendall(block[:n])
                moved += n
            s.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := s.recv(64):
                answer += chunk
            took = time.monotonic() - begun
            if not answer.startswith(b"ok"):
                raise OSError(f"the responder answered {answer[:60]!r}")
    if moved != size:
        raise OSError(f"moved {moved} of {size} bytes")
    return port, took, moved


def main() -> None:
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    config = load_config(DEFAULTS)
    params = config["parameters"]
    server = str(config["server_address"])
    direction = str(params["direction"])
    gap_s, timeout_s = float(params["gap_s"]), float(params["flow_timeout_s"])
    bind = config.get("interface_address")
    plan = [("short", size) for size in short_sizes()]
    plan.append(("long", int(params["long_bytes"])))
    start = datetime.now(UTC)
    settings = tcp_settings(server)
    flows: list[dict[str, Any]] = []
    for index, (kind, size) in enumerate(plan):
        if index:
            time.sleep(gap_s)
        at = time.time()
        record: dict[str, Any] = {"index": index, "kind": kind, "size_bytes": size,
                                  "start_unix_s": at, "local_port": 0, "tool_s": None,
                                  "bytes_moved": 0, "error": None}
        try:
            port, took, moved = one_flow(server=server, direction=direction, size=size,
                                         bind=str(bind) if bind else None,
                                         timeout_s=timeout_s)
            record.update(local_port=port, tool_s=took, bytes_moved=moved)
        except OSError as e:
            record["error"] = str(e) or type(e).__name__
        flows.append(record)
        took = "" if record["tool_s"] is None else f"{record['tool_s']:.3f} s (client timer)"
        print(f"short-flows: {kind} {size} B: {record['error'] or took}", file=sys.stderr)
    result = {"format": FORMAT, "version": VERSION, "direction": direction,
              "server": server, "port": RESPONDER_PORT,
              "interface": str(config.get("interface") or ""), "start": start.isoformat(),
              "long_bytes": int(params["long_bytes"]), "settings": settings, "flows": flows}
    write_result(out, "short-flows.json", result)
    done = sum(1 for f in flows if f["error"] is None)
    print(json.dumps({"direction": direction, "flows": len(flows), "completed": done}))
    if done == 0:
        raise ExperimentError(f"no flow completed; first error: {flows[0]['error']}")


if __name__ == "__main__":
    sys.exit(run_experiment("short-flows", main))
