"""A TAT step with D-ITG: a TCP flow from ITGSend to the measurement server's ITGRecv.

ITGSend is asked (``-x``) to have ITGRecv log the flow on the server under a random
name; the server's log service (server-image/ditg_logs.py, port 9009) hands that log
back over HTTP, and ITGDec decodes it here into 100 ms bins and a summary, parsed by
:mod:`ditg_parse` into the same ``testbed.tat`` record the iperf3 path writes.

D-ITG is rate based: the flow offers far more than a mobile link carries (4 KiB writes
at 10,000 a second, ~330 Mbit/s) so that TCP, not the generator, sets the pace, as
iperf3's greedy sender does. Uplink only: the receiver would have to run on the node
for downlink, and the server cannot open connections to a node behind its operator's
NAT.

Every wait is bounded: the signalling connection must be up within
:data:`CONNECT_TIMEOUT_S` (an unreachable server is an error, not a two-minute kernel
connect timeout), the flow within its length plus :data:`RUN_MARGIN_S`, the log fetch
and the decoding within their own limits. Raw files, kept whatever happens:
``ditg-<n>-itgsend.txt`` (ITGSend's output), ``ditg-<n>-send.log`` and
``ditg-<n>-recv.log`` (the binary logs), ``ditg-<n>-send.txt`` / ``ditg-<n>-recv.txt``
(ITGDec summaries), ``ditg-<n>-bitrate.txt`` (ITGDec's 100 ms bins).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ditg_parse import (
    DitgOutputError,
    clean_summary,
    itgsend_exit_reason,
    itgsend_failure,
    parse_ditg,
)

from testbed_kit.connections import connections_to, server_ip
from testbed_kit.contract import ExperimentError
from testbed_kit.watch import run_watched

#: ITGRecv's signalling port on the measurement server (D-ITG's default).
SIGNAL_PORT = 9000
#: The flow's data port (ITGRecv accepts several flows on one port).
DATA_PORT = 9001
#: The server's log service (server-image/ditg_logs.py).
LOG_PORT = 9009
PACKET_BYTES = 4096
RATE_PPS = 10_000
#: ITGSend has no connect timeout of its own: a reachable server answers in well under
#: a second, even on 3G.
CONNECT_TIMEOUT_S = 8.0
#: Head-room over the flow for set-up and the end of flow exchange.
RUN_MARGIN_S = 30.0
#: The log service holds a log back until ITGRecv stopped writing it; how long to ask.
FETCH_TIMEOUT_S = 20.0
DECODE_TIMEOUT_S = 120.0
_VERSION = re.compile(r"ITGSend version (\S+)")


class DitgError(ExperimentError):
    """A D-ITG step failed; the message is the run's reason, ``output`` what the tool
    printed (kept raw)."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


def itgsend_command(config: dict[str, Any], *, duration_s: float, sender_log: str,
                    receiver_log: str) -> list[str]:
    """ITGSend's command line. Log names are relative (ITGSend runs in the results
    directory, ITGRecv in its own): D-ITG silently writes no log for a long path."""
    server = str(config["server_address"])
    cmd = ["ITGSend", "-T", "TCP", "-a", server, "-Sdp", str(SIGNAL_PORT),
           "-rp", str(DATA_PORT), "-C", str(RATE_PPS), "-c", str(PACKET_BYTES),
           "-t", str(round(duration_s * 1000)), "-l", sender_log, "-x", receiver_log]
    # The signalling is bound to the interface's address. The flow cannot be: D-ITG
    # 2.8.1 cannot bind a TCP flow to an address (-sa: "Address family not supported"),
    # and binding it to the device (-i) loses every packet that arrives on another
    # device, as the emulated fleet's downlink does (it comes out of the link
    # emulator's TUN, deploy/emulation/node-links.sh): the flow stalls. It follows the
    # node's routing to the server, which on the fleet (and on nodes that route each
    # server through its SIM) is the run's interface.
    if config.get("interface_address"):
        cmd += ["-Ssa", str(config["interface_address"])]
    return cmd


def run_itgsend(cmd: list[str], *, timeout_s: float, server: str, cwd: Path,
                connect_s: float = CONNECT_TIMEOUT_S) -> str:
    """Run ITGSend in ``cwd``; its output, or :class:`DitgError` with the reason it
    failed."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, cwd=cwd)
    except OSError as e:
        raise DitgError(f"cannot start ITGSend: {e}") from e
    done = run_watched(proc, timeout_s=timeout_s, start_within_s=connect_s,
                       started=lambda: connections_to(server, SIGNAL_PORT) >= 1)
    output = done.stdout
    if done.killed == "timeout":
        raise DitgError(f"ITGSend did not finish within {timeout_s:.0f} s "
                        "(link stalled?)", output)
    if done.killed == "never_started":
        raise DitgError(f"ITGRecv at {server}:{SIGNAL_PORT} did not answer within "
                        f"{connect_s:.0f} s (server unreachable?)", output)
    if done.returncode != 0:
        raise DitgError(itgsend_exit_reason(done.returncode, output), output)
    failure = itgsend_failure(output)
    if failure:  # ITGSend exits 0 when its flow could not even start
        raise DitgError(f"ITGSend: {failure}", output)
    return output


def fetch_log(server: str, name: str, dest: Path, *, timeout_s: float = FETCH_TIMEOUT_S,
              port: int = LOG_PORT) -> None:
    """Download the receiver's log from the server's log service into ``dest``."""
    url = f"http://{server}:{port}/{name}"
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            with urllib.request.urlopen(url, timeout=max(1.0, left)) as response:
                dest.write_bytes(response.read())
                return
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise DitgError(f"ITGRecv on {server} wrote no log for this flow "
                                f"({url}: not found)") from e
            if e.code != 503 or left <= 1.0:
                raise DitgError(f"cannot fetch the receiver log {url}: HTTP {e.code}") from e
        except (OSError, TimeoutError) as e:
            if left <= 1.0:
                raise DitgError(f"cannot fetch the receiver log {url}: {e}") from e
        time.sleep(1.0)


def decode(log: Path, *extra: str) -> str:
    """ITGDec's summary of ``log`` (spinner removed), with ``extra`` options such as
    ``-v -b 100 <file>`` (``-b`` alone prints no summary)."""
    try:
        # ITGDec splits the log into files in its working directory: the run's /tmp
        # (the root file system is read-only, and they are not results).
        with tempfile.TemporaryDirectory(prefix="itgdec-") as scratch:
            proc = subprocess.run(["ITGDec", str(log.resolve()), *extra],
                                  capture_output=True, text=True, errors="replace",
                                  timeout=DECODE_TIMEOUT_S, check=False, cwd=scratch)
    except subprocess.TimeoutExpired as e:
        raise DitgError(f"ITGDec did not decode {log.name} within "
                        f"{DECODE_TIMEOUT_S:.0f} s") from e
    except OSError as e:
        raise DitgError(f"cannot start ITGDec: {e}") from e
    summary = clean_summary(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise DitgError(f"ITGDec could not decode {log.name} (exit {proc.returncode}): "
                        f"{summary.strip()[-300:]}")
    return summary


def measure(config: dict[str, Any], n: int, out_dir: Path) -> dict[str, Any]:
    """One D-ITG TAT step: raw files into ``out_dir``, the ``testbed.tat`` record back."""
    p = config["parameters"]
    if p["direction"] != "uplink":
        raise DitgError("D-ITG measures uplink only (the server cannot reach a node "
                        "behind NAT); use tat_tool iperf3 for downlink")
    duration_s = float(p["run_s"])
    server = server_ip(str(config["server_address"]))
    name = f"tbtat-{uuid.uuid4().hex}.log"  # unguessable: the log service serves by name
    send_log, recv_log = out_dir / f"ditg-{n}-send.log", out_dir / f"ditg-{n}-recv.log"
    cmd = itgsend_command(config, duration_s=duration_s, sender_log=send_log.name,
                          receiver_log=name)
    print(f"abw-tat: {' '.join(cmd)}", file=sys.stderr)
    start = datetime.now(UTC)
    try:
        output = run_itgsend(cmd, timeout_s=duration_s + RUN_MARGIN_S, server=server,
                             cwd=out_dir)
    except DitgError as e:
        (out_dir / f"ditg-{n}-itgsend.txt").write_text(e.output)
        raise
    (out_dir / f"ditg-{n}-itgsend.txt").write_text(output)
    if not send_log.exists():
        raise DitgError(f"ITGSend wrote no sender log ({send_log.name})")
    fetch_log(server, name, recv_log)
    bitrate = out_dir / f"ditg-{n}-bitrate.txt"
    bin_ms = round(float(p.get("bin_s", 0.1)) * 1000)
    receiver_summary = decode(recv_log, "-v", "-b", str(bin_ms), str(bitrate.resolve()))
    (out_dir / f"ditg-{n}-recv.txt").write_text(receiver_summary)
    sender_summary = decode(send_log)
    (out_dir / f"ditg-{n}-send.txt").write_text(sender_summary)
    version = _VERSION.search(output)
    try:
        return parse_ditg(
            bitrate=bitrate.read_text() if bitrate.exists() else "",
            receiver_summary=receiver_summary, sender_summary=sender_summary,
            direction=str(p["direction"]), interface=str(config.get("interface") or ""),
            server=str(config["server_address"]), port=DATA_PORT, start=start,
            bin_s=bin_ms / 1000, version=version.group(1) if version else "")
    except DitgOutputError as e:
        raise DitgError(f"D-ITG flow to {server}: {e}") from e
