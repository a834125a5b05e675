"""``testbed-agent``: build the agent from its configuration and run it until SIGTERM."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

import docker
import docker.errors

from node_agent import __version__
from node_agent.agent import Agent
from node_agent.backstop import NftBackstop
from node_agent.client import OrchestratorClient
from node_agent.config import AgentConfig, load_config
from node_agent.errors import AgentError
from node_agent.interfaces import (
    CounterSource,
    ProcNetDevCounters,
    SysfsCounters,
    interface_address,
)
from node_agent.metadata.sampler import MetadataSampler, gps_from_config, readers_from_config
from node_agent.metadata.server import MetadataServer
from node_agent.metadata.system import SystemReader
from node_agent.runner import DockerRunner
from node_agent.runnet import ConfinedNetwork, confined_from_config
from node_agent.skew import restart_skewed_if_armed

log = logging.getLogger("node_agent")


def _counters(config: AgentConfig, client: docker.DockerClient) -> CounterSource:
    if config.counters_from == "sysfs":
        return SysfsCounters(config.sysfs_net)

    def pid() -> int:
        try:
            return int(client.api.inspect_container(config.netns_container)["State"]["Pid"])
        except docker.errors.DockerException as e:
            raise AgentError(f"cannot find container {config.netns_container}: {e}") from e

    return ProcNetDevCounters(pid)


def _netns_pid(config: AgentConfig, client: docker.DockerClient) -> Callable[[], int] | None:
    """Outside the node's namespace (counters_from: netns_container) tcpdump and nft
    are run under nsenter into that container's; inside it, as they are."""
    if config.counters_from == "sysfs":
        return None
    return lambda: int(client.api.inspect_container(config.netns_container)["State"]["Pid"])


def _run_network(config: AgentConfig,
                 server: MetadataServer | None) -> ConfinedNetwork | None:
    """Each run's network namespace of its own (``run_network.mode: confined``), with
    the metadata endpoint on its gateway, and what an earlier life of the agent left of
    such namespaces' plumbing removed; None: runs share the node's."""
    if config.run_network.mode != "confined":
        return None
    network = confined_from_config(
        config, metadata_listen=server.listen_also if server is not None else None,
        address_of=lambda name: interface_address(config, name))
    network.clear()
    return network


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(
        level=os.environ.get("TESTBED_AGENT_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = load_config()
        restart_skewed_if_armed(config.state_dir)  # the fault matrix's wrong clock
        dock = docker.from_env()
        dock.ping()
    except AgentError as e:
        log.error("%s", e)
        sys.exit(2)
    except docker.errors.DockerException as e:
        log.error("cannot reach the Docker engine (is /var/run/docker.sock mounted?): %s", e)
        sys.exit(2)
    counters = _counters(config, dock)
    client = OrchestratorClient(
        config.orchestrator_url, config.token, timeout_s=config.request_timeout_s
    )
    metadata = MetadataSampler(readers_from_config(config), gps_from_config(config),
                               system=SystemReader(config.state_dir),
                               interval_s=config.metadata_interval_s)
    metadata.start()
    server: MetadataServer | None = None
    if config.metadata_port:
        try:
            server = MetadataServer(metadata, port=config.metadata_port)
            server.start()
        except OSError as e:  # measuring matters more than serving metadata
            log.error("cannot serve live metadata on 127.0.0.1:%d: %s",
                      config.metadata_port, e)
    network = _run_network(config, server)
    runner = DockerRunner(
        dock,
        counters=counters,
        node_id=config.node_id,
        interfaces=[i.name for i in config.interfaces],
        meter_interval_s=config.meter_interval_s,
        holder_image=config.run_policy.holder_image,
        capture=config.capture,
        capture_netns_pid=_netns_pid(config, dock),
        backstop=(NftBackstop(netns_pid=_netns_pid(config, dock))
                  if config.quota_backstop else None),
        metadata=metadata,
        network=network,
        check_interval_s=config.run_policy.check_interval_s,
    )
    agent = Agent(config, client=client, runner=runner, counters=counters,
                  metadata=metadata)

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        agent.stop(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info(
        "testbed-agent %s for node %s, orchestrator %s",
        __version__, config.node_id, config.orchestrator_url,
    )
    try:
        agent.run()
    except AgentError as e:
        log.error("%s", e)
        sys.exit(1)
    finally:
        if server is not None:
            server.stop()
        metadata.stop()
        client.close()


if __name__ == "__main__":
    main()
