"""iperf3 JSON -> the ``testbed.tat`` result (pure: no I/O, stdlib only).

The format of a TCP transfer's result, which the tat experiment writes for its one
transfer and abw-tat for each TAT step (with iperf3, or D-ITG through its own parser
to the same record), and which the orchestrator's ingest reads.

TAT is what the receiver got, so the throughput bins come from the receiving side:
the server's own report (``server_output_json``, present when the client asked for
``--get-server-output`` and the server runs with ``-J``) for uplink, the client's
intervals for downlink (``-R``). The server must report every 100 ms itself
(``iperf3 -s -J -i 0.1``): the client's ``-i`` does not reach it. When the server's
JSON report is missing (a plain ``iperf3 -s``), uplink falls back to the sender's bins
and says so in ``bins_source``, so a reader never mistakes them for receiver bins.

The 100 ms bins show operator policing (a ~10 s ramp on LTE, or a peak then a lower
plateau on 3G), so they are kept as measured; ``bin_s`` > 0.1 merges them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

FORMAT = "testbed.tat"
VERSION = 1
DIRECTIONS = ("uplink", "downlink")
#: iperf3 report interval the client and server are run with (``-i 0.1``), seconds.
IPERF3_INTERVAL_S = 0.1


class Iperf3OutputError(ValueError):
    """The iperf3 output is unusable; the message says why, for the run's final state."""


def iperf3_error(raw: dict[str, Any]) -> str | None:
    """iperf3's own error message, if the test failed (iperf3 -J may still exit 0)."""
    err = raw.get("error")
    return str(err) if err else None


def is_busy(raw: dict[str, Any]) -> bool:
    """True when the server refused the test because it was running another one: it
    said so, or it reset the control connection before the test started. A busy
    iperf3 server sends its refusal and closes the connection at once; when the
    client's cookie is still unread there, the close is a reset and the client reports
    "unable to receive control message: Connection reset by peer" instead of the
    refusal (seen on the compose fleet with seven nodes starting TATs against one
    server at once, 2026-11-27). With no interval measured, nothing was lost."""
    err = iperf3_error(raw)
    if err is None:
        return False
    low = err.lower()
    return "busy" in low or ("control message" in low and "reset by peer" in low
                             and not raw.get("intervals"))


def _interval_sums(intervals: Any) -> list[dict[str, Any]]:
    if not isinstance(intervals, list):
        raise Iperf3OutputError("iperf3 output has no 'intervals' list")
    sums: list[dict[str, Any]] = []
    for i, interval in enumerate(intervals):
        s = interval.get("sum") if isinstance(interval, dict) else None
        if not isinstance(s, dict) or not {"start", "end", "bytes"} <= s.keys():
            raise Iperf3OutputError(f"iperf3 interval {i} has no usable 'sum'")
        if s.get("omitted"):
            continue
        sums.append(s)
    return sums


def rebin(
    sums: list[dict[str, Any]], bin_s: float, *, interval_s: float = IPERF3_INTERVAL_S
) -> list[dict[str, float | int]]:
    """Merge consecutive iperf3 interval sums into bins of about ``bin_s`` seconds.

    Bins are whole runs of ``round(bin_s / interval_s)`` intervals, counted rather than
    placed by their start times: iperf3's timer drifts late by ~0.1 ms a tick, which
    over a long run would otherwise put two intervals into one bin. The last bin may be
    shorter (iperf3's tail interval); every rate uses the bin's real duration.
    """
    if bin_s <= 0 or interval_s <= 0:
        raise ValueError("bin_s and interval_s must be positive")
    per_bin = max(1, round(bin_s / interval_s))
    out: list[dict[str, float | int]] = []
    for first in range(0, len(sums), per_bin):
        chunk = sums[first : first + per_bin]
        start = float(chunk[0]["start"])
        duration = float(chunk[-1]["end"]) - start
        nbytes = sum(int(s["bytes"]) for s in chunk)
        out.append(
            {
                "t_s": round(start, 6),
                "duration_s": round(duration, 6),
                "bytes": nbytes,
                "bits_per_second": nbytes * 8 / duration if duration > 0 else 0.0,
            }
        )
    return out


def _start_time(raw: dict[str, Any]) -> datetime:
    try:
        return datetime.fromtimestamp(int(raw["start"]["timestamp"]["timesecs"]), tz=UTC)
    except (KeyError, TypeError, ValueError) as e:
        raise Iperf3OutputError("iperf3 output has no start timestamp") from e


def _end_sum(raw: dict[str, Any], key: str) -> dict[str, Any]:
    end = raw.get("end")
    s = end.get(key) if isinstance(end, dict) else None
    if not isinstance(s, dict):
        raise Iperf3OutputError(f"iperf3 output has no end.{key} (did the test finish?)")
    return s


def parse_iperf3(
    raw: dict[str, Any],
    *,
    direction: str,
    interface: str,
    server: str,
    port: int,
    bin_s: float = 0.1,
) -> dict[str, Any]:
    """Turn one iperf3 client JSON report (``-J --get-server-output``) into a TAT result."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    err = iperf3_error(raw)
    if err:
        raise Iperf3OutputError(f"iperf3 failed: {err}")
    server_json = raw.get("server_output_json")
    if direction == "uplink" and isinstance(server_json, dict):
        receiver_intervals = server_json.get("intervals")
        bins_source = "receiver"
    elif direction == "uplink":
        receiver_intervals = raw.get("intervals")
        bins_source = "sender"  # server not in JSON mode: no receiver bins to be had
    else:
        receiver_intervals = raw.get("intervals")
        bins_source = "receiver"
    bins = rebin(_interval_sums(receiver_intervals), bin_s)

    # The client's end section carries both halves: sum_sent from the sender and
    # sum_received from the receiver, whichever side each ran on.
    received = _end_sum(raw, "sum_received")
    sent = _end_sum(raw, "sum_sent")
    receiver_bytes = int(received["bytes"])
    receiver_seconds = float(received.get("seconds") or received["end"] - received["start"])
    start = _start_time(raw)
    end = start + timedelta(seconds=receiver_seconds)
    retransmits = sent.get("retransmits")
    return {
        "format": FORMAT,
        "version": VERSION,
        "direction": direction,
        "interface": interface,
        "server": server,
        "port": port,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "duration_s": round(receiver_seconds, 6),
        "bin_s": bin_s,
        "bins_source": bins_source,
        "bins": bins,
        "mean_bps": receiver_bytes * 8 / receiver_seconds if receiver_seconds > 0 else 0.0,
        "bytes": receiver_bytes,
        "sender_bytes": int(sent["bytes"]),
        "retransmits": int(retransmits) if retransmits is not None else None,
        "iperf3_version": str(raw.get("start", {}).get("version", "")),
    }
