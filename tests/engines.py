"""Stand-ins for the node's container engine (node_agent.engine.ContainerEngine), shared
by unit and integration tests: a unit test imports no test module of another layer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from node_agent.confinement import BoundsUsage
from node_agent.engine import ContainerId, Ended, Holder
from node_agent.rundir import agent_note


class FillingEngine:
    """A container engine stand-in whose experiment's results are larger than the
    disk: copying them out fills it (the session and the disk are real)."""

    def remove_leftovers(self) -> list[str]:
        return []

    def ensure_image(self, image: str) -> str:
        return "sha256:exp"

    def create_holder(self, spec: Any, needs: Any) -> Holder:
        return Holder(ContainerId("h"), pid=1, sandbox_key=None)

    def create(self, spec: Any, holder: Holder) -> ContainerId:
        return ContainerId("c")

    def start(self, container: ContainerId) -> None: ...

    def running(self, container: ContainerId) -> bool:
        return False

    def await_end(self, container: ContainerId, *, within_s: float) -> None: ...

    def kill(self, container: ContainerId) -> bool:
        return True

    def wait(self, container: ContainerId, *, timeout_s: float) -> Ended:
        return Ended(0)

    def usage(self, holder: Holder, container: ContainerId | None) -> BoundsUsage:
        return BoundsUsage()

    def remove_holder(self, spec: Any) -> None: ...

    def collect(self, container: ContainerId, holder: Holder, run_dir: Path) -> str:
        (run_dir / "results").mkdir(parents=True, exist_ok=True)
        try:  # as the Docker engine: a copy that fails is noted, not raised
            with (run_dir / "results" / "big.bin").open("wb") as f:
                while True:
                    f.write(os.urandom(65536))
        except OSError as e:
            agent_note(run_dir, f"cannot copy /results out of the container: {e}")
        return ""

    def remove(self, container: ContainerId) -> None: ...
