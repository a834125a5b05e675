"""One run's kernel quota as its session sees it: arm before the container starts, ask
whether it is spent at every meter tick, disarm when the run is over.

At each tick the kernel's count is held against the interface's: a kernel ahead by
more than a read apart explains, with the interface still that far under the limit, has
charged packets that never left (the interface's own queue dropped them and they were
sent again, :func:`~node_agent.backstop.drifted`), and its quota is replaced by one
that has counted what the interface moved. The first time, the run's logs/agent.txt
says so, with both figures.

The nftables work is :class:`~node_agent.backstop.NftBackstop`'s; here is what a run
does when it fails. A quota that cannot be armed leaves the run on the meter alone (the
run's logs/agent.txt says so); one that cannot be read counts as not spent (the meter
still holds the reservation); one that cannot be removed is cleared when the agent
next starts. None of it fails the run.
"""

from __future__ import annotations

import logging
from pathlib import Path

from node_agent.backstop import BackstopError, NftBackstop, drifted
from node_agent.rundir import agent_note
from node_agent.spec import RunSpec

log = logging.getLogger(__name__)


class RunQuota:
    def __init__(self, backstop: NftBackstop, spec: RunSpec, run_dir: Path) -> None:
        self.backstop = backstop
        self.spec = spec
        self.run_dir = run_dir
        self.armed = False
        #: Times the quota was set back to the interface's count (see above).
        self.rebased = 0

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

    def spent(self, moved_bytes: int | None) -> bool:
        """The quota is spent and drops the run's packets (False when not armed).
        ``moved_bytes``: what the interface counters show the run moved, both ways (None:
        they could not be read, and the kernel's count stands)."""
        if not self.armed:
            return False
        spec = self.spec
        try:
            state = self.backstop.state(spec.run_id)
            if moved_bytes is not None and drifted(state.used_bytes, moved_bytes,
                                                   state.limit_bytes):
                self.backstop.rearm(spec.run_id, interface=spec.interface,
                                    address=spec.interface_address,
                                    limit_bytes=state.limit_bytes, used_bytes=moved_bytes)
                self.rebased += 1
                log.info("run %s: kernel quota at %d bytes, the interface at %d: set back "
                         "to the interface's count", spec.run_id, state.used_bytes, moved_bytes)
                if self.rebased == 1:
                    agent_note(self.run_dir, (
                        f"the kernel quota had counted {state.used_bytes} bytes where the "
                        f"interface moved {moved_bytes}: packets the interface's own queue "
                        "dropped and the sender sent again; it was set back to the "
                        "interface's count, and is each time it runs ahead again"))
                return False
            return state.spent
        except BackstopError as e:
            log.warning("run %s: cannot read or reset its kernel quota: %s", spec.run_id, e)
            return False

    def disarm(self) -> None:
        if not self.armed:
            return
        self.armed = False
        try:
            self.backstop.disarm(self.spec.run_id)
        except BackstopError as e:  # cleared at the next agent start at the latest
            log.warning("run %s: cannot remove its kernel quota: %s", self.spec.run_id, e)
