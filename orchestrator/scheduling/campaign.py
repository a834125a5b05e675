"""Expanding a campaign spec into run requests, in a balanced order.

This is the first, simple planner: a campaign lists experiments with parameters, the
nodes (and interfaces) to run them on, and a number of repetitions; runs are booked as
soon as possible, one at a time per node. Recurrence, tag expressions and quotas come
with the campaign scheduler.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.scheduling.bounds import MAX_NODES, MAX_PARAMETERS, MAX_STEPS
from testbed_common.bounds import ExperimentStr, InterfaceStr, Label128, NameStr, NodeIdStr


class CampaignStep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    experiment: ExperimentStr
    parameters: dict[str, Any] = Field({}, max_length=MAX_PARAMETERS)
    #: Node ids; empty means every node of the fleet that is not in maintenance.
    nodes: list[NodeIdStr] = Field([], max_length=MAX_NODES)
    #: Interface names, or empty for every interface of each node.
    interfaces: list[InterfaceStr] = Field([], max_length=16)


class CampaignSpec(BaseModel):
    """Bounded like version 2 (scheduling.bounds), into which it is converted."""

    model_config = ConfigDict(extra="forbid")
    name: Label128
    project: NameStr = "default"
    steps: list[CampaignStep] = Field(min_length=1, max_length=MAX_STEPS)
    repetitions: int = Field(1, ge=1, le=1000)


@dataclass(frozen=True)
class RunRequest:
    experiment: str
    node_id: str
    interface: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    repetition: int = 0


@dataclass(frozen=True)
class Expansion:
    requests: tuple[RunRequest, ...]
    #: Why a (step, node, interface) combination was not expanded.
    skipped: tuple[str, ...]


def expand(spec: CampaignSpec, fleet: Mapping[str, Sequence[str]]) -> Expansion:
    """Run requests for ``spec`` on ``fleet`` (node id -> interface names).

    Order alternates per repetition (even: steps in order; odd: reversed), the
    order-balancing of the ABw-TAT-ABw / reverse scheme.
    """
    requests: list[RunRequest] = []
    skipped: list[str] = []
    for rep in range(spec.repetitions):
        steps = spec.steps if rep % 2 == 0 else list(reversed(spec.steps))
        for step in steps:
            for node_id in step.nodes or sorted(fleet):
                if node_id not in fleet:
                    if rep == 0:
                        skipped.append(f"{step.experiment}: node {node_id!r} is not in the fleet")
                    continue
                for iface in step.interfaces or fleet[node_id]:
                    if iface not in fleet[node_id]:
                        if rep == 0:
                            skipped.append(
                                f"{step.experiment}: node {node_id!r} has no interface {iface!r}"
                            )
                        continue
                    requests.append(
                        RunRequest(step.experiment, node_id, iface, step.parameters, rep)
                    )
    return Expansion(tuple(requests), tuple(skipped))
