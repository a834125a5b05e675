"""What one run's container gets: its configuration and environment (the experiment
contract, docs/experiment-contract.md), built from an assignment and the node's
interface table. Pure: no engine, no network; the runner hands a :class:`RunSpec` to a
:class:`~node_agent.session.RunSession`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from node_agent.clock import ClockEstimate
from node_agent.config import AgentConfig, RunPolicy
from node_agent.confinement import RunLimits, run_limits
from node_agent.errors import RunnerError
from testbed_common.wire import Assignment, Operator, RunResources

#: Where the experiment finds its configuration (read-only) and writes its results.
CONFIG_PATH = "/testbed/config.json"
RESULTS_PATH = "/results"
#: The run's scratch space (a size-bounded tmpfs: the root file system is read-only).
TMP_PATH = "/tmp"
#: A run whose manifest asks nothing, on a node of the default policy.
DEFAULT_LIMITS = run_limits(RunResources(), (), RunPolicy())


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class RunSpec:
    """Everything the container gets (the experiment contract's config.json)."""

    run_id: str
    experiment: str
    image: str
    node_id: str
    netns_container: str
    interface: str
    interface_address: str | None
    operator: Operator
    server_address: str
    parameters: dict[str, Any]
    deadline: datetime
    max_bytes: int
    #: Live metadata server for the experiment (``$TESTBED_METADATA_URL``), when on.
    metadata_url: str | None = None
    #: The measurement server's capture service (the agent's, not the experiment's).
    server_capture_url: str | None = None
    #: The node's clock offset estimate when the run was deployed (meta/run.json's
    #: ``clock``): ``deadline`` is already in node time (node_agent.clock).
    clock: ClockEstimate | None = None
    #: What confines the run (its manifest's resources and capabilities, capped by the
    #: node's policy).
    limits: RunLimits = DEFAULT_LIMITS

    def config_json(self) -> dict[str, Any]:
        return {
            "format": "testbed.run-config",
            "version": 1,
            "run_id": self.run_id,
            "experiment": self.experiment,
            "node_id": self.node_id,
            "interface": self.interface,
            "interface_address": self.interface_address,
            "operator": self.operator.model_dump(mode="json"),
            "server_address": self.server_address,
            "parameters": self.parameters,
            "deadline": self.deadline.isoformat(),
            "max_bytes": self.max_bytes,
        }

    def environment(self) -> dict[str, str]:
        env = {
            "TESTBED_CONFIG": CONFIG_PATH,
            "TESTBED_RESULTS": RESULTS_PATH,
            "TESTBED_RUN_ID": self.run_id,
            "TESTBED_INTERFACE": self.interface,
            "TESTBED_INTERFACE_ADDRESS": self.interface_address or "",
            "TESTBED_SERVER": self.server_address,
        }
        if self.metadata_url:
            env["TESTBED_METADATA_URL"] = self.metadata_url
        for name, value in self.parameters.items():
            key = "TESTBED_PARAM_" + re.sub(r"[^A-Za-z0-9]", "_", name).upper()
            env[key] = value if isinstance(value, str) else json.dumps(value)
        return env


def build_spec(
    assignment: Assignment, config: AgentConfig, *, interface_address: str | None,
    clock: ClockEstimate | None = None,
) -> RunSpec:
    """The run's spec from its assignment and the node's interface table (pure)."""
    iface = config.interface(assignment.interface)
    if iface is None:
        configured = ", ".join(i.name for i in config.interfaces)
        raise RunnerError(
            f"interface {assignment.interface} is not configured on this node ({configured})"
        )
    return RunSpec(
        run_id=assignment.run_id,
        experiment=assignment.experiment,
        image=assignment.image,
        node_id=config.node_id,
        netns_container=config.netns_container,
        interface=iface.name,
        interface_address=interface_address,
        operator=iface.operator,
        server_address=iface.server_address,
        parameters=dict(assignment.parameters),
        deadline=assignment.deadline,
        max_bytes=assignment.max_bytes,
        metadata_url=(f"http://127.0.0.1:{config.metadata_port}"
                      if config.metadata_port else None),
        server_capture_url=iface.server_capture_url,
        clock=clock,
        limits=run_limits(assignment.resources, assignment.capabilities, config.run_policy),
    )
