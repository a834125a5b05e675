"""What confines one run (pure: no engine). The experiment's manifest asks
(:class:`~testbed_common.wire.RunResources`, capabilities from a short allowed list); the
node's policy (:class:`~node_agent.config.RunPolicy`) fills what it did not ask and caps
what it did: the result is the run's :class:`RunLimits`, recorded in its meta/run.json.

Around those limits the engine holds the rest fixed for every run, built-in or not
(docs/security.md, "Run confinement"): every capability dropped but the declared ones,
no-new-privileges, the engine's default seccomp profile, never privileged, a read-only
root, and /tmp and /results as size- and file-bounded tmpfs volumes.

Here too: what a run's use of its bounds says (:class:`BoundsUsage`, read from the run's
volumes and the engine's counters), and the named reason a run ends with when it hit one
(:func:`bound_reached`, :func:`end_bound`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from node_agent.config import RunPolicy
from node_agent.errors import RunnerError
from testbed_common.wire import RunResources

#: Free bytes under which a tmpfs counts as full: a write of one page more fails.
FULL_SLACK_BYTES = 16 * 1024


@dataclass(frozen=True)
class RunLimits:
    """The effective limits of one run."""

    #: Memory of its processes, MiB (its results and /tmp, which live in memory, are
    #: added to the engine's limit: see :attr:`memory_limit_mb`).
    memory_mb: int
    cpus: float
    pids: int
    results_mb: int
    result_files: int
    tmp_mb: int
    capabilities: tuple[str, ...] = ()

    @property
    def memory_limit_mb(self) -> int:
        """The engine's memory limit: the processes' memory, plus the results and /tmp,
        whose tmpfs pages are charged to the run (so that each bound holds on its own:
        a full /results is ENOSPC, not an out-of-memory kill)."""
        return self.memory_mb + self.results_mb + self.tmp_mb

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "capabilities": list(self.capabilities),
                "memory_limit_mb": self.memory_limit_mb}


def run_limits(asked: RunResources, capabilities: list[str] | tuple[str, ...],
               policy: RunPolicy) -> RunLimits:
    """The run's limits: what it asked for, else the node's default, each capped by the
    node's policy. Raises :class:`RunnerError` when it needs a capability the node does
    not grant (the run is refused before anything starts)."""
    refused = sorted(set(capabilities) - set(policy.capabilities))
    if refused:
        raise RunnerError(
            f"node does not grant {refused} to runs (it grants {sorted(policy.capabilities)}: "
            "run_policy.capabilities in its agent config)")
    d, cap = policy.default, policy.cap

    def pick(name: str) -> Any:
        value = getattr(asked, name)
        return min(getattr(d, name) if value is None else value, getattr(cap, name))

    return RunLimits(
        memory_mb=pick("memory_mb"), cpus=pick("cpus"), pids=pick("pids"),
        results_mb=pick("results_mb"), result_files=pick("result_files"),
        tmp_mb=pick("tmp_mb"), capabilities=tuple(sorted(set(capabilities))),
    )


@dataclass(frozen=True)
class VolumeUsage:
    """A tmpfs volume's use, as statfs sees it."""

    size_bytes: int
    free_bytes: int
    files: int
    free_files: int

    @property
    def used_bytes(self) -> int:
        return self.size_bytes - self.free_bytes

    @property
    def full(self) -> bool:
        return self.free_bytes < FULL_SLACK_BYTES or self.free_files <= 0

    @property
    def out_of_files(self) -> bool:
        return self.free_files <= 0


@dataclass(frozen=True)
class BoundsUsage:
    """What a run uses of its bounds at one look (None: could not be read)."""

    results: VolumeUsage | None = None
    tmp: VolumeUsage | None = None
    pids: int | None = None
    memory_bytes: int | None = None
    #: CPU time its processes used since it started, seconds.
    cpu_s: float | None = None


def bound_reached(usage: BoundsUsage, limits: RunLimits) -> str | None:
    """The named reason when the run reached one of its bounds (its results or /tmp
    full, its process limit reached), else None. A run is stopped for it: its writes
    already fail (ENOSPC, EAGAIN on fork), and a run that waits out its slot after that
    only delays the node's next run."""
    results = usage.results
    if results is not None and results.out_of_files:
        return (f"results over their bound of {limits.result_files} files (writes past it "
                "fail with ENOSPC)")
    if results is not None and results.full:
        return (f"results over their bound of {limits.results_mb} MB (writes past it fail "
                "with ENOSPC)")
    if usage.tmp is not None and usage.tmp.full:
        return f"/tmp over its bound of {limits.tmp_mb} MB (writes past it fail with ENOSPC)"
    if usage.pids is not None and usage.pids >= limits.pids:
        return f"reached its process limit of {limits.pids} (fork fails past it)"
    return None


def end_bound(usage: BoundsUsage, limits: RunLimits, *, oom_killed: bool) -> str | None:
    """The named reason of a run that ended at one of its bounds: killed out of memory
    (the engine says so), or a bound reached (:func:`bound_reached`); else None."""
    if oom_killed:
        return (f"out of memory: killed at its memory limit of {limits.memory_limit_mb} MB "
                f"({limits.memory_mb} MB for its processes, the rest for its results and "
                "/tmp)")
    return bound_reached(usage, limits)
