"""One run's kernel quota as its session sees it: arm before the container starts, ask
whether it is spent at every meter tick, disarm when the run is over.

The nftables work is :class:`~node_agent.backstop.NftBackstop`'s; here is what a run
does when it fails. A quota that cannot be armed leaves the run on the meter alone (the
run's logs/agent.txt says so); one that cannot be read counts as not spent (the meter
still holds the reservation); one that cannot be removed is cleared when the agent
next starts. None of it fails the run.
"""

from __future__ import annotations

import logging
from pathlib import Path

from node_agent.backstop import BackstopError, NftBackstop
from node_agent.rundir import agent_note
from node_agent.spec import RunSpec

log = logging.getLogger(__name__)


class RunQuota:
    def __init__(self, backstop: NftBackstop, spec: RunSpec, run_dir: Path) -> None:
        self.backstop = backstop
        self.spec = spec
        self.run_dir = run_dir
        self.armed = False

    def arm(self) -> bool:
        """Arm the run's quota of its reservation's size; False: the meter alone."""
        spec = self.spec
        try:
            self.backstop.arm(spec.run_id, interface=spec.interface,
                              address=spec.interface_address, limit_bytes=spec.max_bytes)
        except BackstopError as e:
            log.warning("run %s: no kernel quota backstop: %s", spec.run_id, e)
            agent_note(self.run_dir, f"no kernel quota backstop (the meter alone holds the "
                                     f"reservation): {e}")
            return False
        self.armed = True
        return True

    def spent(self) -> bool:
        """The quota is spent and drops the run's packets (False when not armed)."""
        if not self.armed:
            return False
        try:
            return self.backstop.state(self.spec.run_id).spent
        except BackstopError as e:
            log.warning("run %s: cannot read its kernel quota: %s", self.spec.run_id, e)
            return False

    def disarm(self) -> None:
        if not self.armed:
            return
        self.armed = False
        try:
            self.backstop.disarm(self.spec.run_id)
        except BackstopError as e:  # cleared at the next agent start at the latest
            log.warning("run %s: cannot remove its kernel quota: %s", self.spec.run_id, e)
