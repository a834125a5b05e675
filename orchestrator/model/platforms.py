"""What a node offers an experiment's image besides its architecture: the native tools.

The native tools (tools/: the ABw estimator, the link emulator, the flow tool) are built
for amd64 only where no toolchain for another target exists (docs/deploying.md). A node
without them says so when it registers, and carries the tag :data:`NO_NATIVE_TOOLS_TAG`:
visible in ``testbed node list`` and the fleet page, selectable in a campaign
(``tag!=no-native-tools``), and the planner books no experiment that needs the tools
there (orchestrator.scheduling.platforms).
"""

from __future__ import annotations

from collections.abc import Iterable

NO_NATIVE_TOOLS_TAG = "no-native-tools"


def native_tools_tags(tags: Iterable[object], *, has_tools: bool) -> list[str]:
    """A node's tags with :data:`NO_NATIVE_TOOLS_TAG` set or cleared as its agent
    reported, the others as they were (order kept)."""
    kept = [str(t) for t in tags if str(t) != NO_NATIVE_TOOLS_TAG]
    return kept if has_tools else [*kept, NO_NATIVE_TOOLS_TAG]
