"""The order of an ABw-TAT-ABw session's steps, and interface byte counters.

Pure planning (``session_steps``) is kept apart from the I/O in ``session.py`` so the
order-balancing is unit-tested without a network.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Step:
    kind: str  # "abw", "tat" or "pause"
    half: int
    method: str = ""  # ABw tool for "abw" steps
    seconds: float = 0.0  # for "pause"


def session_steps(*, method1: str, method2: str, halves: int, pause_s: float) -> list[Step]:
    """ABW1-TAT-ABW2, pause, ABW2-TAT-ABW1: each tool runs once before and once after a
    TAT, so neither always measures a link just loaded (or just idle)."""
    steps = [Step("abw", 0, method1), Step("tat", 0), Step("abw", 0, method2)]
    if halves == 2:
        steps += [Step("pause", 0, seconds=pause_s),
                  Step("abw", 1, method2), Step("tat", 1), Step("abw", 1, method1)]
    return steps


def interface_counters(
    interface: str, proc_net_dev: Path = Path("/proc/net/dev")
) -> tuple[int, int]:
    """(rx_bytes, tx_bytes) of ``interface`` in this network namespace, from the kernel's
    counters: what the SIM is billed for, whatever the tools report."""
    for line in proc_net_dev.read_text().splitlines()[2:]:
        name, _, data = line.partition(":")
        if name.strip() == interface:
            fields = data.split()
            return int(fields[0]), int(fields[8])
    raise LookupError(f"interface {interface!r} not in {proc_net_dev}")
