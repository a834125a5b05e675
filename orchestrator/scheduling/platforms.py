"""The architecture filter of the placement pipeline: may this node run these images?

A node has one processor architecture (what its agent reported; amd64 when it reported
none, as every node did before nodes reported theirs). An experiment's image provides
the platforms its manifest lists (``linux/amd64`` when it lists none). A campaign's
session runs every step on one node, so the node must be able to run each step's image:
otherwise its SIMs are deferred with the reason, naming the node, its architecture and
what the experiment provides, e.g. ``architecture: node se-01 is arm64, experiment tat
provides linux/amd64``. Deferred, not rejected: the node may be replaced, or the
experiment's next version built for more platforms.

The native tools are the second fact: a node tagged ``no-native-tools``
(orchestrator.model.platforms) gets no experiment whose manifest says it needs them.

Pure: the facts come in, a reason (or none) comes out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from orchestrator.model.platforms import NO_NATIVE_TOOLS_TAG
from orchestrator.scheduling.selection import NodeFacts
from testbed_common.platforms import node_architecture, platform_architecture


class ImagePlatforms(Protocol):
    """What the filter needs of an experiment manifest."""

    @property
    def platforms(self) -> tuple[str, ...]: ...

    @property
    def native_tools(self) -> bool: ...


class Mismatch(StrEnum):
    ARCHITECTURE = "architecture"
    NATIVE_TOOLS = "native_tools"


@dataclass(frozen=True)
class Refusal:
    kind: Mismatch
    message: str


def refusal(node: NodeFacts, experiment: str, image: ImagePlatforms) -> Refusal | None:
    """Why ``node`` cannot run ``experiment``'s image, or None when it can."""
    arch = node_architecture(node.architecture)
    if not any(platform_architecture(p) == arch for p in image.platforms):
        return Refusal(Mismatch.ARCHITECTURE,
                       f"architecture: node {node.id} is {arch}, experiment {experiment} "
                       f"provides {', '.join(image.platforms)}")
    if image.native_tools and NO_NATIVE_TOOLS_TAG in node.tags:
        return Refusal(Mismatch.NATIVE_TOOLS,
                       f"native tools: node {node.id} has none for {arch} (tagged "
                       f"{NO_NATIVE_TOOLS_TAG}), experiment {experiment} needs them")
    return None


def first_refusal(node: NodeFacts, steps: Iterable[tuple[str, ImagePlatforms]]
                  ) -> Refusal | None:
    """The first step (in campaign order) whose image the node cannot run."""
    for experiment, image in steps:
        found = refusal(node, experiment, image)
        if found is not None:
            return found
    return None
