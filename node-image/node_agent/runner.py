"""The agent's run path: a :class:`Runner` builds each run's session and walks it.

For every run the runner puts together what the run needs, each behind its own seam:
the container engine (:mod:`node_agent.engine`; :class:`DockerRunner` uses the local
Docker engine), the run's network (:mod:`node_agent.runnet`), and its lifecycle hooks
(:mod:`node_agent.hooks`: the node's packet capture and the measurement server's, the
kernel quota, the modem and GPS recording), and hands them to a
:class:`~node_agent.session.RunSession`, which walks the run through its phases; when
to stop it is :func:`node_agent.limits.decide`'s call. The outcome and
the run directory (results/, logs/, meta/run.json) are what the bundle is built from.

The names a caller of :meth:`Runner.run` needs are importable from here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import docker
import httpx

from node_agent.backstop import BackstopError, NftBackstop
from node_agent.config import CaptureConfig
from node_agent.engine import LABEL_NODE, LABEL_RUN, ContainerEngine, DockerEngine
from node_agent.hooks import MetadataRecording, Meter, QuotaHook, RunHook
from node_agent.interfaces import CounterSource
from node_agent.metadata.sampler import MetadataSampler
from node_agent.quota import RunQuota
from node_agent.rundir import RunOutcome
from node_agent.runnet import RunNetwork
from node_agent.session import CHECK_INTERVAL_S, RunSession, StopRequest
from node_agent.sidecars import NodeCapture, ServerSideCapture
from node_agent.spec import RunSpec, build_spec, utcnow

__all__ = [
    "LABEL_NODE", "LABEL_RUN", "DockerRunner", "RunOutcome", "RunSpec", "Runner",
    "StopRequest", "build_spec", "utcnow",
]

log = logging.getLogger(__name__)


class Runner:
    """Runs one experiment at a time on ``engine``."""

    def __init__(
        self,
        engine: ContainerEngine,
        *,
        counters: CounterSource,
        interfaces: Sequence[str],
        meter_interval_s: float = 0.5,
        clock: Callable[[], datetime] = utcnow,
        capture: CaptureConfig | None = None,
        capture_netns_pid: Callable[[], int] | None = None,
        backstop: NftBackstop | None = None,
        server_capture_transport: httpx.BaseTransport | None = None,
        metadata: MetadataSampler | None = None,
        network: RunNetwork | None = None,
        check_interval_s: float = CHECK_INTERVAL_S,
    ) -> None:
        """``interfaces``: the node's, whose counters each run's meta records;
        ``capture``: tcpdump each run's interface (None or disabled: no capture), and
        ask the measurement server for its side when the interface has a
        ``server_capture_url``; ``capture_netns_pid``: when the agent is not in the
        node's network namespace, the pid of a process that is (tcpdump is then run
        under nsenter); ``backstop``: the kernel quota that holds each run to its
        reservation (None: the meter alone); ``server_capture_transport``: an httpx
        transport for the server's capture service (tests); ``metadata``: the node's
        modem and GPS samples, recorded into each run's meta/; ``network``: the runs'
        network (None: the node's, shared); ``check_interval_s``: how often a run's
        bounds are looked at."""
        self.engine = engine
        self.metadata = metadata
        self.network = network
        self.check_interval_s = check_interval_s
        self.counters = counters
        self.interfaces = tuple(interfaces)
        self.meter_interval_s = meter_interval_s
        self.clock = clock
        self.capture = capture
        self.capture_netns_pid = capture_netns_pid
        self.backstop = backstop
        self.server_capture_transport = server_capture_transport

    def remove_leftovers(self) -> list[str]:
        """Remove the containers and kernel quotas this node's agent left in an earlier
        life; returns the runs whose containers were removed."""
        removed = self.engine.remove_leftovers()
        if self.backstop is not None:
            try:
                self.backstop.clear()
            except BackstopError as e:
                log.warning("cannot clear the kernel quotas of an earlier life: %s", e)
        return removed

    def session(self, spec: RunSpec, run_dir: Path) -> RunSession:
        """The session of one run, with its hooks: the captures, the modem and GPS
        recording, the kernel quota (made once the run's network is attached: the
        interface's address they filter on is the one the run sees)."""
        return RunSession(
            spec, run_dir, engine=self.engine, counters=self.counters,
            interfaces=self.interfaces,
            make_hooks=lambda run, meter: self.hooks(run, run_dir, meter),
            network=self.network, meter_interval_s=self.meter_interval_s,
            check_interval_s=self.check_interval_s, clock=self.clock,
        )

    def hooks(self, spec: RunSpec, run_dir: Path, meter: Meter) -> list[RunHook]:
        """What runs around one run's container, beside its meter and bounds."""
        hooks: list[RunHook] = [
            NodeCapture.for_run(spec, run_dir, config=self.capture,
                                netns_pid=self.capture_netns_pid),
            ServerSideCapture.for_run(spec, config=self.capture, now=self.clock(),
                                      transport=self.server_capture_transport),
        ]
        if self.metadata is not None:
            hooks.append(MetadataRecording(self.metadata, run_dir))
        if self.backstop is not None:
            hooks.append(QuotaHook(RunQuota(self.backstop, spec, run_dir), meter))
        return hooks

    def run(self, spec: RunSpec, run_dir: Path, *, on_running: Callable[[], None],
            stop: StopRequest) -> RunOutcome:
        """Run ``spec`` to its end, writing results/, logs/ and meta/ to run_dir."""
        return self.session(spec, run_dir).run(on_running=on_running, stop=stop)


class DockerRunner(Runner):
    """A :class:`Runner` on the local Docker engine. ``node_id`` labels the run
    containers; ``holder_image``: the image of the runs' holders (None: the node
    container's own)."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        counters: CounterSource,
        node_id: str,
        interfaces: Sequence[str],
        meter_interval_s: float = 0.5,
        holder_image: str | None = None,
        clock: Callable[[], datetime] = utcnow,
        capture: CaptureConfig | None = None,
        capture_netns_pid: Callable[[], int] | None = None,
        backstop: NftBackstop | None = None,
        server_capture_transport: httpx.BaseTransport | None = None,
        metadata: MetadataSampler | None = None,
        network: RunNetwork | None = None,
        check_interval_s: float = CHECK_INTERVAL_S,
    ) -> None:
        super().__init__(
            DockerEngine(client, node_id=node_id, holder_image=holder_image),
            counters=counters, interfaces=interfaces, meter_interval_s=meter_interval_s,
            clock=clock, capture=capture, capture_netns_pid=capture_netns_pid,
            backstop=backstop, server_capture_transport=server_capture_transport,
            metadata=metadata, network=network, check_interval_s=check_interval_s,
        )
