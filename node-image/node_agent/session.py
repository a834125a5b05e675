"""One run, walked through its phases on a container engine.

    prepare   run directory, counters of every interface (meta/run.json's "before")
    create    the image (pulled when missing), the container with its config.json
    prestart  the run interface's baseline, sidecars (captures) started, kernel quota armed
    run       container started (``on_running``: the agent reports RUNNING), then every
              ``meter_interval_s`` an :class:`~node_agent.limits.Observation` of the
              counters, the clock, the quota and any stop request, and
              :func:`~node_agent.limits.decide` says whether to kill it
    exited    exit code, sidecars stopped, the bytes it moved, logs and results copied
    cleanup   quota disarmed, container removed
    finish    sidecars' files and meta documents, meta/run.json

A failure of the engine (:class:`~node_agent.errors.RunnerError`) ends the run FAILED
with its reason, and the later phases still run: whatever happened, the run directory
has meta/run.json and the sidecars' documents, and no container or quota is left.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from node_agent.diskspace import write_failure_reason
from node_agent.engine import ContainerEngine, ContainerId
from node_agent.errors import RunnerError
from node_agent.interfaces import Counters, CounterSource, InterfaceMissing, counter_snapshot
from node_agent.limits import Observation, Requested, StopDecision, Usage, decide, ended
from node_agent.quota import RunQuota
from node_agent.rundir import RunOutcome, write_run_meta
from node_agent.sidecars import Sidecar
from node_agent.spec import RunSpec
from testbed_common.states import RunState

log = logging.getLogger(__name__)

#: Seconds to wait for the container's exit code once it ended or was killed.
WAIT_TIMEOUT_S = 60


class StopRequest:
    """A request to stop a run early, with the state and reason to report; the first
    request wins."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.state = RunState.CANCELLED
        self.reason = ""

    def set(self, state: RunState, reason: str) -> None:
        if not self._event.is_set():
            self.state, self.reason = state, reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def requested(self) -> Requested | None:
        return Requested(self.state, self.reason) if self._event.is_set() else None


class RunSession:
    """One run of ``spec`` into ``run_dir``: :meth:`run` walks the phases once."""

    def __init__(
        self,
        spec: RunSpec,
        run_dir: Path,
        *,
        engine: ContainerEngine,
        counters: CounterSource,
        interfaces: Sequence[str],
        sidecars: Sequence[Sidecar] = (),
        quota: RunQuota | None = None,
        meter_interval_s: float = 0.5,
        clock: Callable[[], datetime],
    ) -> None:
        """``interfaces``: every interface whose counters go into meta/run.json;
        ``quota``: the run's kernel quota (None: the meter alone)."""
        self.spec = spec
        self.run_dir = run_dir
        self.engine = engine
        self.counters = counters
        self.interfaces = tuple(interfaces)
        self.sidecars = tuple(sidecars)
        self.quota = quota
        self.meter_interval_s = meter_interval_s
        self.clock = clock

    def run(self, *, on_running: Callable[[], None], stop: StopRequest) -> RunOutcome:
        """Run to the end, writing results/, logs/ and meta/ into the run directory."""
        spec, run_dir = self.spec, self.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        before = self._snapshot()
        image_id: str | None = None
        container: ContainerId | None = None
        try:
            image_id = self.engine.ensure_image(spec.image)
            container = self.engine.create(spec)
            outcome = replace(self._supervise(container, on_running, stop, before),
                              image_id=image_id)
        except RunnerError as e:
            outcome = RunOutcome(
                RunState.FAILED, str(e), image_id=image_id, counters_before=before,
                counters_after=self._snapshot(),
            )
        finally:
            if container is not None:
                self.engine.remove(container)
        failed_write: OSError | None = None
        for sidecar in self.sidecars:
            try:
                sidecar.finish(run_dir)
            except OSError as e:  # a full disk: every sidecar still gets its turn
                failed_write = failed_write or e
        try:
            write_run_meta(spec, run_dir, outcome)
        except OSError as e:
            failed_write = failed_write or e
        if failed_write is not None:
            # Its traffic is measured (bytes_used stays), its files are not all there: a
            # run that succeeded fails; one that failed or was cancelled says both.
            why = write_failure_reason(failed_write)
            outcome = (replace(outcome, state=RunState.FAILED, reason=why)
                       if outcome.state == RunState.UPLOADING
                       else replace(outcome, reason=f"{outcome.reason}; {why}"))
            log.error("run %s: %s", spec.run_id, outcome.reason)
            with contextlib.suppress(OSError):
                write_run_meta(spec, run_dir, outcome)
        return outcome

    def _snapshot(self) -> dict[str, dict[str, int]]:
        return counter_snapshot(self.counters, self.interfaces)

    def _supervise(self, container: ContainerId, on_running: Callable[[], None],
                   stop: StopRequest, before: dict[str, dict[str, int]]) -> RunOutcome:
        try:
            baseline = self.counters.read(self.spec.interface)
        except InterfaceMissing as e:
            raise RunnerError(f"cannot meter the run's interface: {e}") from e
        self._prestart()
        try:
            return self._run(container, on_running, stop, before, baseline)
        finally:
            self._exited()
            if self.quota is not None:
                self.quota.disarm()

    def _prestart(self) -> None:
        """What comes before the container's start, all at once: each sidecar's
        prestart, which waits for its own capture to listen (the node's tcpdump; the
        server's, over HTTP), and the kernel quota's arming (nft in the node's
        namespace), each a few tenths of a second on a loaded node; the container's
        start waited for them one after the other. An exception is raised here as it
        would be in turn."""
        steps: list[Callable[[], object]] = [sidecar.prestart for sidecar in self.sidecars]
        if self.quota is not None:
            steps.append(self.quota.arm)
        if len(steps) < 2:
            for step in steps:
                step()
            return
        with ThreadPoolExecutor(len(steps), thread_name_prefix="prestart") as pool:
            for started in [pool.submit(step) for step in steps]:
                started.result()

    def _exited(self) -> None:
        for sidecar in self.sidecars:
            sidecar.exited()

    def _run(self, container: ContainerId, on_running: Callable[[], None],
             stop: StopRequest, before: dict[str, dict[str, int]],
             baseline: Counters) -> RunOutcome:
        spec, engine = self.spec, self.engine
        engine.start(container)
        started = self.clock()
        on_running()
        stopped: StopDecision | None = None
        used = 0
        while engine.running(container):
            counted = True
            try:
                current = self.counters.read(spec.interface)
            except InterfaceMissing as e:  # gone for now: nothing moved on it
                current, counted = baseline, False
                log.warning("run %s: %s", spec.run_id, e)
            used = Usage(baseline, current).bytes
            stopped = decide(Observation(
                now=self.clock(), deadline=spec.deadline, used_bytes=used,
                max_bytes=spec.max_bytes,
                quota_spent=(self.quota is not None
                             and self.quota.spent(used if counted else None)),
                requested=stop.requested(),
            ))
            if stopped is not None:
                log.warning("run %s: stopping: %s", spec.run_id, stopped.reason)
                if not engine.kill(container):
                    log.info("run %s: its experiment ended on its own before the stop",
                             spec.run_id)
                    stopped = None  # its exit code says how it ended, its results go up
                break
            engine.await_end(container, within_s=self.meter_interval_s)
        exit_code = engine.wait(container, timeout_s=WAIT_TIMEOUT_S)
        ended_at = self.clock()
        self._exited()  # right after the container's end, before results are copied
        with contextlib.suppress(InterfaceMissing):
            used = Usage(baseline, self.counters.read(spec.interface)).bytes
        stderr = engine.collect(container, self.run_dir)
        state, reason = ended(stopped, exit_code=exit_code, stderr=stderr)
        return RunOutcome(
            state, reason, exit_code=exit_code, started_at=started, ended_at=ended_at,
            bytes_used=used, counters_before=before, counters_after=self._snapshot(),
        )
