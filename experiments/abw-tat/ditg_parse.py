"""D-ITG's decoded receiver log -> the ``testbed.tat`` result (pure: no I/O, stdlib only).

A D-ITG TAT step is a TCP flow from ITGSend to the server's ITGRecv; ITGDec decodes the
receiver's log into 100 ms bins (``ITGDec <log> -b 100 <file>``: a ``Time`` header,
then per bin its start, one Kbit/s column per flow and an ``Aggregate-Flow`` column) and
a summary (``Total time``, ``Bytes received``...). This module turns those texts into
the same ``testbed.tat`` v1 record the iperf3 path writes
(:func:`testbed_kit.tat_result.parse_iperf3`),
so the session summary, the ingest and the pages treat both tools alike.

ITGDec divides every bin's bytes by the full bin width, the short tail bin too; the
bytes are recovered from that rate and the tail bin's rate is recomputed over its real
duration, as iperf3's tail interval is.
"""

from __future__ import annotations

import re
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

from testbed_kit.tat_result import DIRECTIONS, FORMAT, VERSION

#: ITGDec's progress spinner (backspace, then one of |\-/), before its summary.
_SPINNER = re.compile(r"(?:\x08[|\\/-])+")
_FIELD = re.compile(r"^\s*([A-Za-z][A-Za-z -]*?)\s*=\s*([-0-9.]+)", re.MULTILINE)
_TOTALS_MARK = "TOTAL RESULTS"
_BANNER = ("ITGSend version", "Compile-time", "Type ITGSend -h")
_FAILURE = re.compile(r"\berror\b|could not|cannot", re.IGNORECASE)


class DitgOutputError(ValueError):
    """ITGDec's output is unusable; the message says why, for the run's final state."""


def clean_summary(text: str) -> str:
    """ITGDec's stdout without its progress spinner: the summary as a reader wants it."""
    return _SPINNER.sub("", text)


def itgsend_failure(output: str) -> str | None:
    """What went wrong, from ITGSend's output: it exits 0 even when its flow could not
    start ("Could not bind a new socket...", "FlowSender interrupted by an error")."""
    bad = [line.strip() for line in output.splitlines() if _FAILURE.search(line)]
    return "; ".join(bad) if bad else None


def itgsend_exit_reason(returncode: int, output: str) -> str:
    """Why ITGSend exited non-zero, in the run's words. A receiver that dies mid-flow
    shows as a broken pipe (SIGPIPE, 141 through a shell) or as ITGSend's "Receiver has
    shut down the connection"; either is a lost connection to ITGRecv."""
    lines = [line.strip() for line in output.splitlines() if line.strip()
             and not line.strip().startswith(_BANNER)]
    errors = [line for line in lines if _FAILURE.search(line)]
    detail = (errors or lines or ["no message"])[-1]
    if returncode in (-signal.SIGPIPE, 128 + signal.SIGPIPE):
        return "the connection to ITGRecv was lost during the flow (ITGSend: broken pipe)"
    if "shut down the connection" in detail or "Connection reset" in detail:
        return f"the connection to ITGRecv was lost during the flow (ITGSend: {detail})"
    return f"ITGSend exited {returncode}: {detail}"


def summary_totals(text: str) -> dict[str, float]:
    """The ``TOTAL RESULTS`` figures of an ITGDec summary, by name (``Bytes received``,
    ``Total time``, ``Total packets``, ``Packets dropped``, ``Number of flows``...)."""
    cleaned = clean_summary(text)
    _, mark, totals = cleaned.partition(_TOTALS_MARK)
    if not mark:
        raise DitgOutputError("ITGDec printed no TOTAL RESULTS (empty or unreadable log?)")
    figures = {name.strip(): float(value) for name, value in _FIELD.findall(totals)}
    if int(figures.get("Number of flows", 0)) < 1 or "Bytes received" not in figures:
        raise DitgOutputError("the D-ITG log holds no flow: nothing was received")
    return figures


def bitrate_bins(text: str, *, bin_s: float, total_s: float) -> list[dict[str, float | int]]:
    """``ITGDec -b`` output as ``testbed.tat`` bins (aggregate of all flows): start
    offset, duration (the last bin ends at ``total_s``), bytes and bit/s."""
    if bin_s <= 0:
        raise ValueError("bin_s must be positive")
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if not lines or lines[0][0] != "Time" or lines[0][-1] != "Aggregate-Flow":
        raise DitgOutputError("ITGDec bitrate file has no 'Time ... Aggregate-Flow' header")
    bins: list[dict[str, float | int]] = []
    for row in lines[1:]:
        try:
            t = float(row[0])
            kbps = float(row[-1])
        except (ValueError, IndexError) as e:
            raise DitgOutputError(f"ITGDec bitrate line {' '.join(row)!r} is not numbers") from e
        nbytes = round(kbps * 1000 * bin_s / 8)
        duration = min(bin_s, max(total_s - t, 0.0))
        bins.append({
            "t_s": round(t, 6),
            "duration_s": round(duration, 6),
            "bytes": nbytes,
            "bits_per_second": nbytes * 8 / duration if duration > 0 else 0.0,
        })
    if not bins:
        raise DitgOutputError("ITGDec bitrate file has no bins: nothing was received")
    return bins


def parse_ditg(
    *,
    bitrate: str,
    receiver_summary: str,
    sender_summary: str,
    direction: str,
    interface: str,
    server: str,
    port: int,
    start: datetime,
    bin_s: float = 0.1,
    version: str = "",
) -> dict[str, Any]:
    """One D-ITG TCP flow as a TAT result; bins and mean from the receiver's log.

    ``start`` is when ITGSend was started (the log's clock has no date); the session
    pairs TAT with the ABw runs by it, for which a fraction of a second does not matter.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    received = summary_totals(receiver_summary)
    sent = summary_totals(sender_summary)
    seconds = received.get("Total time", 0.0)
    if seconds <= 0:
        raise DitgOutputError("the D-ITG receiver log spans no time")
    receiver_bytes = int(received["Bytes received"])
    bins = bitrate_bins(bitrate, bin_s=bin_s, total_s=seconds)
    start = start.astimezone(UTC)
    return {
        "format": FORMAT,
        "version": VERSION,
        "tool": "ditg",
        "direction": direction,
        "interface": interface,
        "server": server,
        "port": port,
        "start": start.isoformat(),
        "end": (start + timedelta(seconds=seconds)).isoformat(),
        "duration_s": round(seconds, 6),
        "bin_s": bin_s,
        "bins_source": "receiver",
        "bins": bins,
        "mean_bps": receiver_bytes * 8 / seconds,
        "bytes": receiver_bytes,
        # the sender's own log counts what it wrote ("received" by its log, in ITGDec's words)
        "sender_bytes": int(sent["Bytes received"]),
        "retransmits": None,  # D-ITG does not see TCP's retransmissions
        "ditg_version": version,
    }
