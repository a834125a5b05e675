"""What the agent enforces on a running experiment (pure decisions, no I/O).

MONROE checked quotas once a minute and killed with ``kill -9``; here the runner reads
the interface counters every 0.5 s and asks :func:`verdict` whether to stop, so a run
overshoots its reservation by at most half a second of traffic, and not at all where
the kernel backstop (an nftables quota, :mod:`node_agent.backstop`) is armed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from node_agent.interfaces import Counters


@dataclass(frozen=True)
class Usage:
    """Bytes moved on the run's interface since the run started (both directions)."""

    baseline: Counters
    current: Counters

    @property
    def bytes(self) -> int:
        rx = self.current.rx_bytes - self.baseline.rx_bytes
        tx = self.current.tx_bytes - self.baseline.tx_bytes
        # A counter that went backwards was reset (interface re-created): count from 0.
        return (rx if rx >= 0 else self.current.rx_bytes) + (
            tx if tx >= 0 else self.current.tx_bytes
        )


def verdict(*, now: datetime, deadline: datetime, used_bytes: int, max_bytes: int,
            quota_spent: bool = False) -> str | None:
    """The reason to kill the run now, or None to let it go on. ``quota_spent``: the
    kernel backstop (:mod:`node_agent.backstop`) has spent the reservation and drops
    the run's packets, though the counters, which include link-layer headers or lag
    by a read, may not show it yet."""
    if used_bytes > max_bytes:
        return f"traffic reservation exceeded: used {used_bytes} of {max_bytes} bytes"
    if quota_spent:
        return (f"traffic reservation exceeded: the kernel quota of {max_bytes} bytes is "
                f"spent and drops the run's packets (interface counters: {used_bytes} bytes)")
    if now >= deadline:
        return f"exceeded its time slot (deadline {deadline.isoformat()})"
    return None


def exit_reason(exit_code: int, stderr: str) -> str:
    """Reason for a run whose experiment exited on its own with ``exit_code``."""
    if exit_code == 0:
        return "experiment finished; uploading its results"
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    reason = f"experiment exited with code {exit_code}"
    # StateReport.reason is at most 2000 characters.
    return f"{reason}: {last[:1800]}" if last else f"{reason} (no stderr)"


def disk_refusal(*, free_bytes: int, min_free_bytes: int, path: str) -> str | None:
    """Why the node must not start a run with this little disk left, or None. A run's
    capture and results land on that disk and its bundle waits there until uploaded: a
    run started on a full disk would measure and lose its data."""
    if free_bytes >= min_free_bytes:
        return None
    return (f"node disk nearly full: {free_bytes // 10**6} MB free in {path}, runs need "
            f"at least {min_free_bytes // 10**6} MB (min_free_disk_bytes); free space there "
            "(spooled bundles upload once the orchestrator is reachable)")
