"""Modem interfaces as the kernel sees them: byte counters and IPv4 addresses.

Counters come from /sys/class/net/<if>/statistics when the agent shares the node's
network namespace, or from /proc/<pid>/net/dev of the namespace-holding container
otherwise. Both are cumulative since the interface appeared; the meter works on
differences, so a counter reset (interface re-created) is treated as a new baseline.
The counters' record, the /proc/net/dev parsing and the address lookup are the
experiment kit's (:mod:`testbed_kit.interface`): an experiment reads its interface
with the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from node_agent.config import AgentConfig
from node_agent.errors import AgentError
from testbed_common.wire import InterfaceReport
from testbed_kit.interface import Counters as Counters
from testbed_kit.interface import ipv4_address as ipv4_address
from testbed_kit.interface import parse_proc_net_dev as parse_proc_net_dev


class InterfaceMissing(AgentError):
    """The named interface does not exist (modem unplugged, namespace gone)."""


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
