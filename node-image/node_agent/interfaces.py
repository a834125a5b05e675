"""Modem interfaces as the kernel sees them: byte counters and IPv4 addresses.

Counters come from /sys/class/net/<if>/statistics when the agent shares the node's
network namespace, or from /proc/<pid>/net/dev of the namespace-holding container
otherwise. Both are cumulative since the interface appeared; the meter works on
differences, so a counter reset (interface re-created) is treated as a new baseline.
"""

from __future__ import annotations

import fcntl
import socket
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from node_agent.config import AgentConfig
from node_agent.errors import AgentError
from testbed_common.wire import InterfaceReport


class InterfaceMissing(AgentError):
    """The named interface does not exist (modem unplugged, namespace gone)."""


@dataclass(frozen=True)
class Counters:
    rx_bytes: int
    tx_bytes: int

    @property
    def total(self) -> int:
        return self.rx_bytes + self.tx_bytes


class CounterSource(Protocol):
    def read(self, name: str) -> Counters:
        """Current counters of interface ``name``; raises :class:`InterfaceMissing`."""
        ...


class SysfsCounters:
    """Counters of the agent's own network namespace."""

    def __init__(self, root: Path = Path("/sys/class/net")) -> None:
        self.root = root

    def read(self, name: str) -> Counters:
        stats = self.root / name / "statistics"
        try:
            return Counters(
                rx_bytes=int((stats / "rx_bytes").read_text()),
                tx_bytes=int((stats / "tx_bytes").read_text()),
            )
        except (OSError, ValueError) as e:
            raise InterfaceMissing(f"interface {name}: cannot read {stats}: {e}") from e


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


class ProcNetDevCounters:
    """Counters of another namespace, read through a process that lives in it."""

    def __init__(self, pid: Callable[[], int], proc: Path = Path("/proc")) -> None:
        self._pid = pid
        self.proc = proc

    def read(self, name: str) -> Counters:
        try:
            path = self.proc / str(self._pid()) / "net" / "dev"
            table = parse_proc_net_dev(path.read_text())
        except (OSError, AgentError) as e:
            raise InterfaceMissing(f"interface {name}: cannot read its namespace: {e}") from e
        if name not in table:
            raise InterfaceMissing(f"interface {name} is not in {path} ({sorted(table)})")
        return table[name]


def ipv4_address(name: str) -> str | None:
    """The interface's IPv4 address in the agent's namespace, or None (SIOCGIFADDR)."""
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(
                s.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15])
            )
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def is_up(root: Path, name: str) -> bool:
    """Administratively up (IFF_UP in /sys/class/net/<if>/flags)."""
    try:
        return bool(int((root / name / "flags").read_text(), 16) & 0x1)
    except (OSError, ValueError):
        return False


def interface_address(config: AgentConfig, name: str) -> str | None:
    iface = config.interface(name)
    if iface is not None and iface.address:
        return iface.address
    return ipv4_address(name) if config.counters_from == "sysfs" else None


def snapshot(config: AgentConfig, counters: CounterSource,
             detected_models: Mapping[str, str] | None = None) -> list[InterfaceReport]:
    """Every configured interface with its operator, address, counters and modem
    model (``detected_models``, as the modem's metadata source names it, over the
    configured one)."""
    detected = detected_models or {}
    reports: list[InterfaceReport] = []
    for iface in config.interfaces:
        try:
            c = counters.read(iface.name)
            present = True
        except InterfaceMissing:
            c, present = Counters(0, 0), False
        if config.counters_from == "sysfs":
            up = present and is_up(config.sysfs_net, iface.name)
        else:
            up = present
        reports.append(
            InterfaceReport(
                name=iface.name,
                operator=iface.operator,
                rat=iface.rat,
                address=interface_address(config, iface.name) if present else None,
                rx_bytes=c.rx_bytes,
                tx_bytes=c.tx_bytes,
                up=up,
                modem_model=detected.get(iface.name) or iface.modem_model,
            )
        )
    return reports


def counter_snapshot(counters: CounterSource, names: Sequence[str]) -> dict[str, dict[str, int]]:
    """The counters of each interface present (a run's meta/run.json, before and after)."""
    out = {}
    for name in names:
        try:
            c = counters.read(name)
        except InterfaceMissing:
            continue
        out[name] = {"rx_bytes": c.rx_bytes, "tx_bytes": c.tx_bytes}
    return out
