"""goodput-sequence: the first transfer after idle against the ones that follow.

The protocol (after Pentikousis et al., first-transfer goodput on 3G):

0. warm up: one transfer of 1 KiB, not counted, so that the first measured transfer
   differs from the rest only in what the idle gap changes (the radio's state), not
   in a cold interpreter, server thread or neighbour cache: on a flat link without
   it, the first transfer is a few ms slower than the rest for those reasons alone;
1. stay silent on the interface for ``idle_gap_s`` (longer than the radio's release
   timer, so the radio falls back to idle and the first transfer starts cold);
2. make ``transfers`` back-to-back transfers of ``size_bytes`` each, every one on a
   fresh TCP connection to the measurement server's HTTP payload responder (port
   9080): a download (``GET /payload?bytes=D``) or an upload (``POST /payload``);
3. time each from ``connect()`` to its last byte received (downlink: the last body
   byte at the node; uplink: the server's answer, sent once it holds the last byte);
4. write ``goodput.json`` (format testbed.goodput-sequence v1): every transfer's times,
   and g1 against the median of the rest with its 95 % interval
   (:mod:`testbed_kit.goodput`).

It imports the experiment kit and the standard library only.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
from datetime import UTC, datetime
from typing import Any

from testbed_kit.contract import ExperimentError, load_config, results_dir, run_experiment
from testbed_kit.goodput import FORMAT, VERSION, GoodputError, goodput_bps, summarise
from testbed_kit.interface import Counters, interface_counters
from testbed_kit.results import write_result

DEFAULTS: dict[str, Any] = {"size_bytes": 65536, "transfers": 101, "idle_gap_s": 15,
                            "direction": "downlink"}
#: The payload responder (server-image/payload_server.py).
PORT = int(os.environ.get("TESTBED_PAYLOAD_PORT", "9080"))
#: One transfer may take this long beyond its bytes at 100 kbit/s: a link that slow
#: is no measurement, and a stuck server must end the run with a reason.
SLACK_S = 30.0
#: The warm-up transfer before the idle gap, bytes (not counted).
WARMUP_BYTES = 1024
#: What an upload writes per send() call.
CHUNK = 64 * 1024


def transfer(*, server: str, source: str | None, size: int, direction: str) -> dict[str, Any]:
    """One transfer on a fresh connection: its start (UTC), and the seconds from
    connect() to connected, to the first body byte (downlink), and to the last byte."""
    timeout = SLACK_S + size * 8 / 100e3
    conn = http.client.HTTPConnection(server, PORT, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    start = datetime.now(UTC)
    t0 = time.monotonic()
    first_byte_s = None
    try:
        conn.connect()
        connect_s = time.monotonic() - t0
        if direction == "downlink":
            conn.request("GET", f"/payload?bytes={size}")
            response = conn.getresponse()
            if response.status != 200:
                raise ExperimentError(f"payload server answered {response.status}: "
                                      f"{response.read(500).decode(errors='replace')}")
            got = 0
            while chunk := response.read(CHUNK):
                if got == 0:
                    first_byte_s = time.monotonic() - t0
                got += len(chunk)
        else:
            block = bytes(min(size, CHUNK))
            conn.putrequest("POST", "/payload")
            conn.putheader("Content-Length", str(size))
            conn.putheader("Content-Type", "application/octet-stream")
            conn.endheaders()
            left = size
            while left:
                conn.send(block[:min(left, CHUNK)])
                left -= min(left, CHUNK)
            response = conn.getresponse()
            answer = response.read(500)
            if response.status != 200:
                raise ExperimentError(f"payload server answered {response.status}: "
                                      f"{answer.decode(errors='replace')}")
            got = int(json.loads(answer)["received"])
        total_s = time.monotonic() - t0
    except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
        raise ExperimentError(f"transfer to {server}:{PORT} failed: {e!r}") from e
    finally:
        conn.close()
    return {"start": start.isoformat(), "connect_s": connect_s, "first_byte_s": first_byte_s,
            "total_s": total_s, "bytes": got}


def counters(interface: str | None) -> Counters | None:
    try:
        return interface_counters(interface) if interface else None
    except LookupError:
        return None


def main() -> None:
    out = results_dir()
    out.mkdir(parents=True, exist_ok=True)
    config = load_config(DEFAULTS)
    params = config["parameters"]
    size, n = int(params["size_bytes"]), int(params["transfers"])
    idle_s, direction = float(params["idle_gap_s"]), str(params["direction"])
    server, source = str(config["server_address"]), config.get("interface_address")
    interface = config.get("interface")

    warmup = transfer(server=server, source=source, size=WARMUP_BYTES,  # 0.
                      direction=direction)
    time.sleep(idle_s)  # 1. the radio falls back to idle: the first transfer starts cold
    before = counters(interface)
    transfers = []
    for i in range(1, n + 1):  # 2.-3. back to back, each on a fresh connection
        t = transfer(server=server, source=source, size=size, direction=direction)
        transfers.append({"index": i, **t, "goodput_bps": goodput_bps(t["bytes"], t["total_s"])})
        if t["bytes"] != size:
            raise ExperimentError(f"transfer {i} moved {t['bytes']} of {size} bytes")
    after = counters(interface)

    summary = summarise([t["goodput_bps"] for t in transfers], size)  # 4.
    result: dict[str, Any] = {
        "format": FORMAT, "version": VERSION, "direction": direction, "size_bytes": size,
        "idle_gap_s": idle_s, "interface": interface or "", "server": server, "port": PORT,
        "warmup": warmup, "transfers": transfers, "summary": summary.as_dict(),
    }
    if before and after:
        result["iface_rx_bytes"] = after.rx_bytes - before.rx_bytes
        result["iface_tx_bytes"] = after.tx_bytes - before.tx_bytes
    write_result(out, "goodput.json", result)
    print(f"goodput-sequence: {direction} {n} x {size} B: g1 {summary.g1_bps / 1e6:.2f} "
          f"Mbit/s, median of the rest {summary.median_bps / 1e6:.2f} Mbit/s "
          f"(95 % CI {summary.ci_low_bps / 1e6:.2f}-{summary.ci_high_bps / 1e6:.2f}); "
          f"g1 below it: {summary.g1_below_ci}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(run_experiment("goodput-sequence", main, failures=(GoodputError,)))
