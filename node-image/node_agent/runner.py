"""The agent's run path: a :class:`Runner` builds each run's session and walks it.

For every run the runner puts together what the run needs, each behind its own seam:
the container engine (:mod:`node_agent.engine`; :class:`DockerRunner` uses the local
Docker engine), the sidecars (:mod:`node_agent.sidecars`: the node's packet capture
and the measurement server's), the kernel quota (:mod:`node_agent.quota`), and hands
them to a :class:`~node_agent.session.RunSession`, which walks the run through its
phases; when to stop it is :func:`node_agent.limits.decide`'s call. The outcome and
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
from node_agent.holder import DockerHolder
from node_agent.interfaces import CounterSource
from node_agent.quota import RunQuota
from node_agent.rundir import RunOutcome
from node_agent.runnet import ConfinedNetwork
from node_agent.session import RunSession, StopRequest
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
    ) -> None:
        """``interfaces``: the node's, whose counters each run's meta records;
        ``capture``: tcpdump each run's interface (None or disabled: no capture), and
        ask the measurement server for its side when the interface has a
        ``server_capture_url``; ``capture_netns_pid``: when the agent is not in the
        node's network namespace, the pid of a process that is (tcpdump is then run
        under nsenter); ``backstop``: the kernel quota that holds each run to its
        reservation (None: the meter alone); ``server_capture_transport``: an httpx
        transport for the server's capture service (tests)."""
        self.engine = engine
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
        """The session of one run, with its sidecars and quota."""
        sidecars = (
            NodeCapture.for_run(spec, run_dir, config=self.capture,
                                netns_pid=self.capture_netns_pid),
            ServerSideCapture.for_run(spec, config=self.capture, now=self.clock(),
                                      transport=self.server_capture_transport),
        )
        return RunSession(
            spec, run_dir, engine=self.engine, counters=self.counters,
            interfaces=self.interfaces, sidecars=sidecars,
            quota=RunQuota(self.backstop, spec, run_dir) if self.backstop else None,
            meter_interval_s=self.meter_interval_s, clock=self.clock,
        )

    def run(self, spec: RunSpec, run_dir: Path, *, on_running: Callable[[], None],
            stop: StopRequest) -> RunOutcome:
        """Run ``spec`` to its end, writing results/, logs/ and meta/ to run_dir."""
        return self.session(spec, run_dir).run(on_running=on_running, stop=stop)


class DockerRunner(Runner):
    """A :class:`Runner` on the local Docker engine. ``node_id`` labels the run
    containers; ``net_raw``: experiments get CAP_NET_RAW; ``network`` and ``holder``:
    each run in a network namespace of its own (None: the node's)."""

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        counters: CounterSource,
        node_id: str,
        interfaces: Sequence[str],
        meter_interval_s: float = 0.5,
        net_raw: bool = True,
        clock: Callable[[], datetime] = utcnow,
        capture: CaptureConfig | None = None,
        capture_netns_pid: Callable[[], int] | None = None,
        backstop: NftBackstop | None = None,
        server_capture_transport: httpx.BaseTransport | None = None,
        network: ConfinedNetwork | None = None,
        holder: DockerHolder | None = None,
    ) -> None:
        super().__init__(
            DockerEngine(client, node_id=node_id, net_raw=net_raw, network=network,
                         holder=holder), counters=counters,
            interfaces=interfaces, meter_interval_s=meter_interval_s, clock=clock,
            capture=capture, capture_netns_pid=capture_netns_pid, backstop=backstop,
            server_capture_transport=server_capture_transport,
        )
