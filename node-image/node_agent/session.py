"""One run, walked through its phases on a container engine, with its lifecycle hooks
(:mod:`node_agent.hooks`) around it.

    prepare   run directory, counters of every interface (meta/run.json's "before")
    holder    the image (pulled when missing); the run's holder container, which holds
              its network namespace and bounded volumes; the run's network attached
              (:mod:`node_agent.runnet`: what the experiment is told of it)
    create    the experiment container in the holder's namespace, with its config.json
    prestart  every hook's prestart, all at once (the meter's baseline, the captures,
              the kernel quota, the modem and GPS recording)
    run       container started, hooks' poststart (``on_running``: the agent reports
              RUNNING), then every ``meter_interval_s`` an
              :class:`~node_agent.limits.Observation` to which each hook adds what it
              saw (the bytes moved, the quota, the run's bounds) with the clock and any
              stop request, and :func:`~node_agent.limits.decide` says whether to kill it
    exited    how it ended (exit code, killed out of memory), hooks' exited, logs and
              results copied out of the holder
    stop      hooks' stop (quota disarmed, recording ended), the network detached, the
              container and its holder removed
    finish    hooks' finish (the captures' files and meta documents), meta/run.json

A failure of the engine (:class:`~node_agent.errors.RunnerError`) ends the run FAILED
with its reason, and the later phases still run: whatever happened, the run directory
has meta/run.json and the sidecars' documents, and no container, volume or quota is left.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from node_agent.diskspace import write_failure_reason
from node_agent.engine import ContainerEngine, ContainerId, Holder
from node_agent.errors import RunnerError
from node_agent.hooks import Bounds, Meter, RunHook
from node_agent.interfaces import CounterSource, counter_snapshot
from node_agent.limits import Observation, Requested, StopDecision, decide, ended
from node_agent.rundir import RunOutcome, write_run_meta
from node_agent.runnet import RunNetwork, SharedNetwork
from node_agent.spec import RunSpec
from testbed_common.states import RunState

log = logging.getLogger(__name__)

#: Seconds to wait for the container's exit code once it ended or was killed.
WAIT_TIMEOUT_S = 60
#: How often a run's bounds are looked at by default, seconds (run_policy.check_interval_s).
CHECK_INTERVAL_S = 2.0


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
        hooks: Sequence[RunHook] = (),
        make_hooks: Callable[[RunSpec, Meter], Sequence[RunHook]] | None = None,
        network: RunNetwork | None = None,
        meter_interval_s: float = 0.5,
        check_interval_s: float = CHECK_INTERVAL_S,
        clock: Callable[[], datetime],
    ) -> None:
        """``interfaces``: every interface whose counters go into meta/run.json;
        ``hooks``: what runs around the container, beside the meter (first) and the
        run's bounds (last); ``make_hooks``: more of them, made once the run's network
        is attached, from the node's spec (the SIM's address, which the captures and
        the kernel quota see) and the meter; ``network``: the run's network
        (None: the node's, shared)."""
        self.spec = spec
        self.run_dir = run_dir
        self.engine = engine
        self.counters = counters
        self.interfaces = tuple(interfaces)
        self.meter = Meter(spec, counters)
        self.hooks: list[RunHook] = [self.meter, *hooks]
        self.make_hooks = make_hooks
        self.network = network or SharedNetwork(
            netns_container=spec.netns_container,
            address_of=lambda _name: spec.interface_address, metadata_url=spec.metadata_url)
        self.meter_interval_s = meter_interval_s
        self.check_interval_s = check_interval_s
        self.clock = clock
        self.bounds: Bounds | None = None
        self._prestarted = False

    def run(self, *, on_running: Callable[[], None], stop: StopRequest) -> RunOutcome:
        """Run to the end, writing results/, logs/ and meta/ into the run directory."""
        spec, run_dir = self.spec, self.run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        before = self._snapshot()
        image_id: str | None = None
        container: ContainerId | None = None
        holder: Holder | None = None
        attached = False
        try:
            image_id = self.engine.ensure_image(spec.image)
            booked = (spec.interface,)
            holder = self.engine.create_holder(
                spec, self.network.holder_needs(spec.run_id, booked))
            view = self.network.attach(spec.run_id, holder_pid=holder.pid,
                                       sandbox_key=holder.sandbox_key, booked=booked)
            attached = True
            # The experiment is told the run's own view (a confined run's address inside
            # its namespace, the metadata endpoint it reaches); the hooks and meta/run.json
            # keep the node's (the SIM's address, which the captures and the server see).
            seen = replace(spec, interface_address=view.addresses.get(spec.interface),
                           metadata_url=view.metadata_url)
            self._make_hooks(spec)
            container = self.engine.create(seen, holder)
            self.bounds = Bounds(spec, self.engine, holder, container,
                                 interval_s=self.check_interval_s, monotonic=time.monotonic)
            self.hooks.append(self.bounds)
            outcome = replace(self._supervise(container, holder, on_running, stop, before),
                              image_id=image_id)
        except RunnerError as e:
            outcome = RunOutcome(
                RunState.FAILED, str(e), image_id=image_id, counters_before=before,
                counters_after=self._snapshot(),
            )
        finally:
            for hook in self.hooks if self._prestarted else ():
                hook.exited()
                hook.stop()
            if attached:
                self.network.detach(spec.run_id)
            if container is not None:
                self.engine.remove(container)
            if holder is not None:
                self.engine.remove_holder(spec)
        if self.bounds is not None:
            outcome = replace(outcome, confinement=self.bounds.document())
        self._make_hooks(spec)  # a run that failed before: their documents say so
        failed_write: OSError | None = None
        for hook in self.hooks:
            try:
                hook.finish(run_dir)
            except OSError as e:  # a full disk: every hook still gets its turn
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

    def _make_hooks(self, spec: RunSpec) -> None:
        """The hooks made from the run's spec as its network tells it, once."""
        if self.make_hooks is not None:
            self.hooks.extend(self.make_hooks(spec, self.meter))
            self.make_hooks = None

    def _snapshot(self) -> dict[str, dict[str, int]]:
        return counter_snapshot(self.counters, self.interfaces)

    def _supervise(self, container: ContainerId, holder: Holder,
                   on_running: Callable[[], None], stop: StopRequest,
                   before: dict[str, dict[str, int]]) -> RunOutcome:
        self._prestart()
        return self._run(container, holder, on_running, stop, before)

    def _prestart(self) -> None:
        """Every hook's prestart before the container's start, all at once: each capture
        waits for its own tcpdump to listen (the node's; the server's, over HTTP), the
        kernel quota is armed (nft in the node's namespace), each a few tenths of a
        second on a loaded node; the container's start waited for them one after the
        other. An exception is raised here as it would be in turn."""
        self._prestarted = True
        steps = [hook.prestart for hook in self.hooks]
        if len(steps) < 2:
            for step in steps:
                step()
            return
        with ThreadPoolExecutor(len(steps), thread_name_prefix="prestart") as pool:
            for started in [pool.submit(step) for step in steps]:
                started.result()

    def _observe(self, stop: StopRequest) -> Observation:
        obs = Observation(now=self.clock(), deadline=self.spec.deadline, used_bytes=0,
                          max_bytes=self.spec.max_bytes, requested=stop.requested())
        for hook in self.hooks:
            obs = hook.observe(obs)
        return obs

    def _run(self, container: ContainerId, holder: Holder, on_running: Callable[[], None],
             stop: StopRequest, before: dict[str, dict[str, int]]) -> RunOutcome:
        spec, engine = self.spec, self.engine
        engine.start(container)
        started = self.clock()
        for hook in self.hooks:
            hook.poststart()
        on_running()
        stopped: StopDecision | None = None
        while engine.running(container):
            stopped = decide(self._observe(stop))
            if stopped is not None:
                log.warning("run %s: stopping: %s", spec.run_id, stopped.reason)
                if not engine.kill(container):
                    log.info("run %s: its experiment ended on its own before the stop",
                             spec.run_id)
                    stopped = None  # its exit code says how it ended, its results go up
                break
            engine.await_end(container, within_s=self.meter_interval_s)
        end = engine.wait(container, timeout_s=WAIT_TIMEOUT_S)
        ended_at = self.clock()
        for hook in self.hooks:  # right after the container's end, before results are copied
            hook.exited()
        bound = (self.bounds.ended_at_bound(oom_killed=end.oom_killed)
                 if self.bounds is not None else None)
        stderr = engine.collect(container, holder, self.run_dir)
        state, reason = ended(stopped, exit_code=end.exit_code, stderr=stderr, bound=bound)
        return RunOutcome(
            state, reason, exit_code=end.exit_code, started_at=started, ended_at=ended_at,
            bytes_used=self.meter.used, counters_before=before,
            counters_after=self._snapshot(),
        )
