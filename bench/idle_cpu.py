"""What the running platform costs the host while it does nothing: CPU by process name
over a few windows, and the bytes written to disk by process name.

Why: on a 2-core host every tenth of a core the idle fleet burns is taken from the
link emulators, whose late packets the measurements read as cross traffic
(experiments/abw-tools/README.md), and from the first run of a start. Run it with the
stack up and idle (`scripts/up --no-demo`, no campaign), as root (other users' /proc
entries hide their I/O):

    python3 bench/idle_cpu.py [--windows 3] [--seconds 10]

Counts processes alive at both ends of a window; short-lived ones (health checks'
execs) are missed, so that total is a lower bound. Beside it, the whole host's busy time
from /proc/stat over the same window (every process, the kernel's and the hypervisor's
steal included): the difference is mostly the processes that started and ended within
it. Linux only; standard library only.
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from pathlib import Path


def _stat(pid: str) -> tuple[str, int, int] | None:
    """(command name, CPU ticks, bytes written to storage) of one process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw[raw.rindex(")") + 2:].split()
        written = 0
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                written = int(line.split()[1])
        return name, int(fields[11]) + int(fields[12]), written
    except (OSError, ValueError, IndexError):
        return None


def _snapshot() -> dict[str, tuple[str, int, int]]:
    return {pid: s for pid in os.listdir("/proc") if pid.isdigit() and (s := _stat(pid))}


def _group(name: str) -> str:
    """kworker/u8:4-writeback and kworker/u8:0-writeback are one thing."""
    if name.startswith("kworker/"):
        return "kworker " + name.split("-", 1)[1] if "-" in name else "kworker"
    return name


def _host_busy() -> int:
    """Ticks the host's CPUs spent on anything but idle and I/O wait, since boot."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4]


def window(seconds: float) -> tuple[float, int, collections.Counter[str],
                                    collections.Counter[str]]:
    """(elapsed s, the host's busy ticks, CPU ticks by name, bytes written by name) over
    one window."""
    before = _snapshot()
    busy = _host_busy()
    t0 = time.monotonic()
    time.sleep(seconds)
    busy = _host_busy() - busy
    after = _snapshot()
    elapsed = time.monotonic() - t0
    cpu: collections.Counter[str] = collections.Counter()
    disk: collections.Counter[str] = collections.Counter()
    for pid, (name, ticks, written) in after.items():
        old = before.get(pid)
        if old is None or old[0] != name:
            continue
        cpu[_group(name)] += ticks - old[1]
        disk[_group(name)] += written - old[2]
    return elapsed, busy, cpu, disk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    hz = os.sysconf("SC_CLK_TCK")
    print(f"load average before: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    for k in range(args.windows):
        elapsed, busy, cpu, disk = window(args.seconds)
        total = sum(cpu.values()) / hz / elapsed
        print(f"window {k + 1}: {total:.2f} of a core in all long-lived processes, "
              f"{busy / hz / elapsed:.2f} for the whole host")
        for name, ticks in cpu.most_common(8):
            print(f"    {name:<28} {ticks / hz / elapsed:5.2f} core")
        top = ", ".join(f"{n} {b / elapsed / 1e3:.0f} kB/s" for n, b in disk.most_common(4) if b)
        print(f"    written to disk: {top or 'nothing'}")


if __name__ == "__main__":
    main()
