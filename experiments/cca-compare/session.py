"""cca-compare entry point: CUBIC and BBR, alternately, on one link in one session.

The protocol, after Li et al.'s comparison of the two on a moving mobile user:

1. read back which congestion controls the kernel offers and allows (recorded in the
   result, so a node that could not use one is seen in the data);
2. for each transfer of the plan (:func:`testbed_kit.cca_compare.plan`: per repetition
   a bulk transfer of ``bulk_s`` seconds with each control, then a download of
   ``download_bytes`` with each, the controls' order reversed every other repetition):
   open a new TCP connection to the server's flow responder and move the data, the
   sender using that control on that connection (``TCP_CONGESTION``): the server, asked
   with ``cca=``, for downlink; this socket for uplink. Wait ``gap_s`` so the
   bottleneck's queue drains and no two connections overlap in the capture;
3. write ``cca-compare.json`` (format ``testbed.cca-compare`` v1): each transfer's
   control, kind, local port, span and bytes.

Throughput bins, self-inflicted delay, retransmissions and duplicate ACKs are not
measured here: ingest takes them from the capture at the sender (the server's capture
for downlink, the node's for uplink), matching each connection by its local port. A
transfer that fails is recorded with its error; the run fails only when none completed.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testbed_kit.cca_compare import FORMAT, VERSION, plan
from testbed_kit.contract import ExperimentError, load_config, results_dir, run_experiment
from testbed_kit.results import write_result
from testbed_kit.short_flows import MAX_FLOW_BYTES, RESPONDER_PORT, FlowRequest

DEFAULTS: dict[str, Any] = {"direction": "downlink", "repetitions": 4, "bulk_s": 20.0,
                            "download_bytes": 1_000_000, "gap_s": 1.0,
                            "transfer_timeout_s": 60.0}
CHUNK = 64 * 1024
SYSCTLS = ("tcp_available_congestion_control", "tcp_allowed_congestion_control",
           "tcp_congestion_control")


def kernel_settings() -> dict[str, str]:
    """The congestion controls the kernel offers, allows unprivileged, and defaults to."""
    out: dict[str, str] = {}
    for name in SYSCTLS:
        try:
            out[name] = Path(f"/proc/sys/net/ipv4/{name}").read_text().strip()
        except OSError:
            out[name] = "unknown"
    return out


def one_transfer(*, server: str, request: FlowRequest, bind: str | None,
                 timeout_s: float) -> tuple[int, int]:
    """One transfer on a new connection: (local port, bytes moved). Raises OSError
    when it fails (a control this node may not use included)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        if request.direction == "uplink" and request.cca:
            try:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, request.cca.encode())
            except OSError as e:
                raise OSError(e.errno, f"congestion control {request.cca!r} refused here "
                              f"({e.strerror}): not in net.ipv4.tcp_allowed_congestion_"
                              "control of the node's kernel") from e
        if bind:
            s.bind((bind, 0))
        s.connect((server, RESPONDER_PORT))
        port = int(s.getsockname()[1])
        s.sendall(request.line())
        moved = 0
        if request.direction == "downlink":
            head = b""
            while chunk := s.recv(CHUNK):
                head = head or chunk[:80]
                moved += len(chunk)
            if head.startswith(b"error:"):  # the payload is zeros; this is the responder
                raise OSError(f"the responder answered {head.decode(errors='replace')!r}")
            if moved < request.size and request.seconds is None:
                raise OSError(f"moved {moved} of {request.size} bytes")
            return port, moved
        block = b"\0" * CHUNK
        deadline = None if request.seconds is None else time.monotonic() + request.seconds
        while moved < request.size and (deadline is None or time.monotonic() < deadline):
            n = min(CHUNK, request.size - moved)
            s.sendall(block[:n])
            moved += n
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(64):
            answer += chunk
        if not answer.startswith(b"ok"):
            raise OSError(f"the responder answered {answer[:60]!r}")
    return port, moved


def main() -> None:
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    config = load_config(DEFAULTS)
    params = config["parameters"]
    server = str(config["server_address"])
    direction = str(params["direction"])
    bulk_s, gap_s = float(params["bulk_s"]), float(params["gap_s"])
    download_bytes = int(params["download_bytes"])
    timeout_s = float(params["transfer_timeout_s"])
    bind = config.get("interface_address")
    start = datetime.now(UTC)
    transfers: list[dict[str, Any]] = []
    for item in plan(int(params["repetitions"])):
        if item.index:
            time.sleep(gap_s)
        request = (FlowRequest(direction, MAX_FLOW_BYTES, cca=item.cca, seconds=bulk_s)
                   if item.kind == "bulk" else
                   FlowRequest(direction, download_bytes, cca=item.cca))
        record: dict[str, Any] = {"index": item.index, "repetition": item.repetition,
                                  "cca": item.cca, "kind": item.kind,
                                  "start_unix_s": time.time(), "local_port": 0,
                                  "bytes_moved": 0, "error": None}
        try:
            port, moved = one_transfer(server=server, request=request,
                                       bind=str(bind) if bind else None,
                                       timeout_s=timeout_s)
            record.update(local_port=port, bytes_moved=moved)
        except OSError as e:
            record["error"] = str(e) or type(e).__name__
        record["end_unix_s"] = time.time()
        transfers.append(record)
        took = record["end_unix_s"] - record["start_unix_s"]
        moved_text = f"{record['bytes_moved']} B in {took:.2f} s"
        print(f"cca-compare: {item.kind} {item.cca}: {record['error'] or moved_text}",
              file=sys.stderr)
    result = {"format": FORMAT, "version": VERSION, "direction": direction,
              "server": server, "port": RESPONDER_PORT,
              "interface": str(config.get("interface") or ""), "start": start.isoformat(),
              "bulk_s": bulk_s, "download_bytes": download_bytes,
              "settings": kernel_settings(), "transfers": transfers}
    write_result(out, "cca-compare.json", result)
    done = sum(1 for t in transfers if t["error"] is None)
    print(json.dumps({"direction": direction, "transfers": len(transfers), "completed": done}))
    if done == 0:
        raise ExperimentError(f"no transfer completed; first error: {transfers[0]['error']}")


if __name__ == "__main__":
    sys.exit(run_experiment("cca-compare", main))
