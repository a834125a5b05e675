"""What happens around a run's container: lifecycle hooks (Nomad's task runner hooks,
``client/allocrunner/interfaces/task_lifecycle.go``), which the run's session
(:mod:`node_agent.session`) calls in order, each step for every hook:

    prestart   right before the experiment starts; every hook's at once (each waits for
               its own thing: a capture listening, a quota armed)
    poststart  right after it started
    observe    at every meter tick while it runs: each hook adds what it saw to the
               tick's :class:`~node_agent.limits.Observation`, and
               :func:`~node_agent.limits.decide` (pure) says whether to stop it
    exited     right after it ended (and again, harmlessly, on every way out)
    stop       every way out of the run, whatever happened: undo what prestart did;
               never raises
    finish     after the containers are removed: files and meta documents into the
               run directory; raises only OSError (a full disk)

Here: :class:`RunHook`, a base with every step a no-op; the meter (the run
interface's counters), the kernel quota, the run's bounds (its confinement) and the
modem and GPS recording. The captures are in :mod:`node_agent.sidecars`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from node_agent.confinement import BoundsUsage, bound_reached, end_bound
from node_agent.engine import ContainerEngine, ContainerId, Holder
from node_agent.errors import RunnerError
from node_agent.interfaces import Counters, CounterSource, InterfaceMissing
from node_agent.limits import Observation, Usage
from node_agent.metadata.sampler import MetadataSampler
from node_agent.quota import RunQuota
from node_agent.spec import RunSpec

log = logging.getLogger(__name__)


class RunHook:
    """One thing around a run's container; every step does nothing unless overridden."""

    def prestart(self) -> None:
        return None

    def poststart(self) -> None:
        return None

    def observe(self, obs: Observation) -> Observation:
        return obs

    def exited(self) -> None:
        return None

    def stop(self) -> None:
        return None

    def finish(self, run_dir: Path) -> None:
        return None


class Meter(RunHook):
    """The run interface's byte counters: the baseline before the start, the bytes
    moved since at every tick and once more at the end. An interface that cannot be
    read at the start fails the run (nothing could be metered); later, a read that
    fails counts nothing for that tick."""

    def __init__(self, spec: RunSpec, counters: CounterSource) -> None:
        self.spec = spec
        self.counters = counters
        self.baseline: Counters | None = None
        self.used = 0
        #: The last read succeeded (the kernel quota then compares against it).
        self.counted = False

    def prestart(self) -> None:
        try:
            self.baseline = self.counters.read(self.spec.interface)
        except InterfaceMissing as e:
            raise RunnerError(f"cannot meter the run's interface: {e}") from e

    def read(self) -> int:
        if self.baseline is None:
            return self.used
        try:
            current = self.counters.read(self.spec.interface)
        except InterfaceMissing as e:  # gone for now: nothing moved on it
            self.counted = False
            log.warning("run %s: %s", self.spec.run_id, e)
            return self.used
        self.counted = True
        self.used = Usage(self.baseline, current).bytes
        return self.used

    def observe(self, obs: Observation) -> Observation:
        return replace(obs, used_bytes=self.read())

    def exited(self) -> None:
        self.read()


class QuotaHook(RunHook):
    """The run's kernel quota (:class:`~node_agent.quota.RunQuota`): armed before the
    start, asked at every tick (against the meter's count), disarmed on the way out."""

    def __init__(self, quota: RunQuota, meter: Meter) -> None:
        self.quota = quota
        self.meter = meter

    def prestart(self) -> None:
        self.quota.arm()

    def observe(self, obs: Observation) -> Observation:
        moved = obs.used_bytes if self.meter.counted else None
        return replace(obs, quota_spent=self.quota.spent(moved))

    def stop(self) -> None:
        self.quota.disarm()


class Bounds(RunHook):
    """The run's confinement as it runs: every ``interval_s`` (on a tick), what it uses
    of its bounds (its results and /tmp, its processes); a bound reached stops the run
    with its named reason. At the end, the last look and whether it was killed out of
    memory; the peaks go into meta/run.json's ``confinement``."""

    def __init__(self, spec: RunSpec, engine: ContainerEngine, holder: Holder,
                 container: ContainerId, *, interval_s: float,
                 monotonic: Callable[[], float]) -> None:
        self.spec = spec
        self.engine = engine
        self.holder = holder
        self.container = container
        self.interval_s = interval_s
        self.monotonic = monotonic
        self._next = 0.0
        self.last = BoundsUsage()
        self.peak: dict[str, float] = {}

    def _look(self, container: ContainerId | None) -> BoundsUsage:
        usage = self.engine.usage(self.holder, container)
        self.last = usage
        for name, value in (
            ("memory_bytes", usage.memory_bytes), ("pids", usage.pids),
            ("results_bytes", usage.results.used_bytes if usage.results else None),
            ("result_files", (usage.results.files - usage.results.free_files - 1)
             if usage.results else None),
            ("tmp_bytes", usage.tmp.used_bytes if usage.tmp else None),
            ("cpu_s", usage.cpu_s),
        ):
            if value is not None:
                self.peak[name] = max(self.peak.get(name, 0), value)
        return usage

    def observe(self, obs: Observation) -> Observation:
        now = self.monotonic()
        if now < self._next:
            return obs
        self._next = now + self.interval_s
        reached = bound_reached(self._look(self.container), self.spec.limits)
        return replace(obs, over_bound=reached) if reached else obs

    def ended_at_bound(self, *, oom_killed: bool) -> str | None:
        """The named reason when the run ended at one of its bounds (a last look at its
        volumes: the container is gone from the engine's stats)."""
        return end_bound(self._look(None), self.spec.limits, oom_killed=oom_killed)

    def document(self) -> dict[str, Any]:
        return {**self.spec.limits.to_json(), "peak": dict(self.peak)}


class MetadataRecording(RunHook):
    """The node's modem, GPS and system samples of the run's span, into its meta/."""

    def __init__(self, sampler: MetadataSampler, run_dir: Path) -> None:
        self.sampler = sampler
        self.run_dir = run_dir
        self._stack = contextlib.ExitStack()

    def prestart(self) -> None:
        self._stack.enter_context(self.sampler.recording(self.run_dir))

    def stop(self) -> None:
        try:
            self._stack.close()
        except Exception as e:  # never fails the run
            log.warning("run %s: metadata recording: %s", self.run_dir.name, e)
