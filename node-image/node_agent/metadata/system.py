"""The node's own health as metadata: CPU load, memory, temperature, free disk.

A probe that is too hot, out of memory or out of disk measures badly or not at all;
operators watch these per node beside the modem figures (the ``system`` measurement).
The parsers are pure; :class:`SystemReader` reads /proc, /sys/class/thermal and the
state directory's file system.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SystemSample:
    time: datetime
    cpu_pct: float | None  # busy share of all CPUs since the previous sample
    mem_pct: float | None  # memory in use (not available), percent of total
    temperature_c: float | None  # hottest thermal zone
    disk_free_bytes: int | None  # where the agent keeps its spool

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["time"] = self.time.isoformat()
        return doc


@dataclass(frozen=True)
class CpuTimes:
    busy: int
    total: int


def parse_cpu_times(stat: str) -> CpuTimes | None:
    """The aggregate ``cpu`` line of /proc/stat (pure): idle and iowait are not busy."""
    for line in stat.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            try:
                ticks = [int(p) for p in parts[1:]]
            except ValueError:
                return None
            # user nice system idle iowait irq softirq steal (guest is inside user)
            total = sum(ticks[:8])
            idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
            return CpuTimes(busy=total - idle, total=total)
    return None


def cpu_pct(before: CpuTimes | None, after: CpuTimes | None) -> float | None:
    """Busy percent between two readings (pure); None without two usable readings."""
    if before is None or after is None or after.total <= before.total:
        return None
    return round(100.0 * (after.busy - before.busy) / (after.total - before.total), 1)


def parse_mem_pct(meminfo: str) -> float | None:
    """Memory in use from /proc/meminfo (pure): total minus available."""
    values: dict[str, int] = {}
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key] = int(fields[0])
    total, available = values.get("MemTotal"), values.get("MemAvailable")
    if not total or available is None:
        return None
    return round(100.0 * (total - available) / total, 1)


def hottest_c(readings: Iterable[str]) -> float | None:
    """The highest of thermal zones' ``temp`` files (millidegrees Celsius; pure);
    unreadable or absurd values are skipped."""
    best = None
    for text in readings:
        try:
            value = int(text.strip()) / 1000.0
        except ValueError:
            continue
        if -40.0 <= value <= 150.0 and (best is None or value > best):
            best = value
    return best


class SystemReader:
    """Reads the node's health; CPU load is measured between two reads."""

    def __init__(self, disk_path: Path, *, proc: Path = Path("/proc"),
                 thermal: Path = Path("/sys/class/thermal")) -> None:
        self.disk_path = disk_path
        self.proc = proc
        self.thermal = thermal
        self._last_cpu: CpuTimes | None = None

    def _text(self, path: Path) -> str | None:
        try:
            return path.read_text()
        except OSError:
            return None

    def read(self) -> SystemSample:
        stat = self._text(self.proc / "stat")
        now_cpu = parse_cpu_times(stat) if stat is not None else None
        load = cpu_pct(self._last_cpu, now_cpu)
        self._last_cpu = now_cpu
        meminfo = self._text(self.proc / "meminfo")
        zones = sorted(self.thermal.glob("thermal_zone*/temp")) if self.thermal.is_dir() else []
        temps = [t for t in (self._text(z) for z in zones) if t is not None]
        try:
            st = os.statvfs(self.disk_path)
            free: int | None = st.f_bavail * st.f_frsize
        except OSError:
            free = None
        return SystemSample(
            time=datetime.now(UTC),
            cpu_pct=load,
            mem_pct=parse_mem_pct(meminfo) if meminfo is not None else None,
            temperature_c=hottest_c(temps),
            disk_free_bytes=free,
        )
