"""Whether the next run fits on the node's disk (pure decisions, no I/O).

The spool policy (issue 10): a node that is offline keeps measuring and spools its
result bundles, and the spool is never trimmed of results the orchestrator does not
hold yet. So when the disk is too full for the next run, the node refuses that run,
saying why and what to do, instead of deleting data to make room or starting a run
whose capture and bundle would not fit (it would measure, spend the SIM's data, and
lose the result).

What a run puts on the disk while it lasts: its captures (the node's tcpdump of the
run's interface and the measurement server's, fetched into the run directory), the
experiment's results and logs, then its bundle in the spool while the run directory
still exists. The captures are estimated from the run's reservation (``max_bytes``:
the most traffic it can move) and the capture's settings; everything else is covered
by a configured floor (``min_free_disk_bytes``) that is kept free in any case.
"""

from __future__ import annotations

import errno
import math
from dataclasses import dataclass

#: Bytes of pcap record header per captured packet.
PCAP_RECORD_HEADER = 16
#: The average packet size the capture estimate assumes, bytes: a bulk TCP transfer is
#: full-size segments (~1500 bytes) and about one ACK (~66 bytes) per two of them.
AVERAGE_PACKET_BYTES = 1000
MB = 10**6


def capture_bytes(traffic_bytes: int, *, snaplen: int, max_file_bytes: int) -> int:
    """The size of one capture of ``traffic_bytes`` of traffic: a record of at most
    ``snaplen`` bytes plus its header per packet, capped at the capture's largest
    file (tcpdump is stopped there)."""
    per_packet = min(snaplen, AVERAGE_PACKET_BYTES) + PCAP_RECORD_HEADER
    return min(math.ceil(traffic_bytes * per_packet / AVERAGE_PACKET_BYTES), max_file_bytes)


@dataclass(frozen=True)
class RunFootprint:
    """What one run needs free on the state disk before it starts, bytes."""

    captures: int  # its captures in the run directory
    bundle: int  # their copy in the bundle, while the run directory still exists
    floor: int  # kept free in any case: results, logs, metadata, state reports

    @property
    def total(self) -> int:
        return self.captures + self.bundle + self.floor


def run_footprint(max_bytes: int, *, captures: int, snaplen: int, capture_max_bytes: int,
                  floor_bytes: int) -> RunFootprint:
    """The footprint of a run that may move ``max_bytes`` (its reservation) with
    ``captures`` captures (0: capture off; 1: the node's; 2: and the server's). The
    bundle is counted at the captures' full size: headers compress, but not reliably."""
    one = capture_bytes(max_bytes, snaplen=snaplen, max_file_bytes=capture_max_bytes)
    captures = captures * one
    return RunFootprint(captures=captures, bundle=captures, floor=floor_bytes)


def disk_refusal(*, free_bytes: int, footprint: RunFootprint, path: str,
                 spooled_bundles: int, spooled_bytes: int) -> str | None:
    """Why the node must refuse a run with ``free_bytes`` free on the disk holding its
    state and spool, or None when the run fits. The reason says what to do: the
    spooled bundles go up once the orchestrator is reachable (they are never deleted
    to make room), or an operator frees space on that disk."""
    need = footprint.total
    if free_bytes >= need:
        return None
    waiting = (f"{spooled_bundles} bundle{'s' if spooled_bundles != 1 else ''} "
               f"({_mb(spooled_bytes)} MB) wait in the spool and free their space once "
               "uploaded" if spooled_bundles else "the spool is empty")
    return (f"node disk too full: {free_bytes // MB} MB free in {path}, the run needs "
            f"~{_mb(need)} MB (~{_mb(footprint.captures)} MB of captures, as much again "
            f"for its bundle, and {_mb(footprint.floor)} MB kept free, "
            "min_free_disk_bytes); upload the spool "
            f"(let the node reach the orchestrator: {waiting}) or free space there. "
            "Spooled results are never deleted to make room")


def _mb(n: int) -> int:
    return math.ceil(n / MB)


def write_failure_reason(error: OSError) -> str:
    """The reason a run fails for when the node could not write its files (the disk
    filled while it ran, or another write error). What was already spooled stays; the
    half-written files are not a complete result."""
    where = f" writing {error.filename}" if error.filename else ""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"node disk filled during the run ({error.strerror}{where}); its results "
                "are incomplete. Earlier bundles stay in the spool; upload the spool or free "
                "space on the node before the next run")
    return f"node could not write the run's files ({error.strerror or error}{where})"
