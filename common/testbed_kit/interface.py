"""The run's interface as the kernel sees it: its IPv4 address and byte counters.

The counters are what the SIM is billed for, whatever the tools report: an experiment
reads them around each step to record what the step cost, and the node agent meters
every run with the same parsing. Cumulative since the interface appeared; work on
differences.
"""

from __future__ import annotations

import fcntl
import socket
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PROC_NET_DEV = Path("/proc/net/dev")
#: ioctl(2) request for an interface's address (linux/sockios.h).
_SIOCGIFADDR = 0x8915


@dataclass(frozen=True)
class Counters:
    rx_bytes: int
    tx_bytes: int

    @property
    def total(self) -> int:
        return self.rx_bytes + self.tx_bytes


def parse_proc_net_dev(text: str) -> dict[str, Counters]:
    """Parse /proc/net/dev (two header lines, then ``name: rx_bytes ... tx_bytes ...``)."""
    out: dict[str, Counters] = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or len(fields) < 16:
            continue
        # Receive: bytes packets errs drop fifo frame compressed multicast; then transmit.
        out[name.strip()] = Counters(rx_bytes=int(fields[0]), tx_bytes=int(fields[8]))
    return out


def interface_counters(interface: str, proc_net_dev: Path = PROC_NET_DEV) -> Counters:
    """The counters of ``interface`` in this network namespace; LookupError, naming the
    interfaces there are, when it is not in it."""
    table = parse_proc_net_dev(proc_net_dev.read_text())
    if interface not in table:
        raise LookupError(f"interface {interface!r} not in {proc_net_dev} ({sorted(table)})")
    return table[interface]


@contextmanager
def step_cost(record: dict[str, Any], interface: str,
              raw: Callable[[], list[str]]) -> Iterator[None]:
    """A session step's record filled around its work, however the work ends: its end
    time, what it cost on ``interface`` each way (the kernel's counters, what the SIM is
    billed; nothing counted without an interface), the raw files it left (``raw()``),
    and its error when it fails (re-raised), so a failed step still says what it spent."""
    before = interface_counters(interface) if interface else Counters(0, 0)
    try:
        yield
    except Exception as e:
        record["error"] = str(e)
        raise
    finally:
        after = interface_counters(interface) if interface else Counters(0, 0)
        record.update(end=datetime.now(UTC).isoformat(),
                      iface_rx_bytes=after.rx_bytes - before.rx_bytes,
                      iface_tx_bytes=after.tx_bytes - before.tx_bytes, raw=raw())


def ipv4_address(interface: str) -> str | None:
    """The interface's IPv4 address in this network namespace, or None (SIOCGIFADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(
                s.fileno(), _SIOCGIFADDR, struct.pack("256s", interface.encode()[:15])
            )
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])
