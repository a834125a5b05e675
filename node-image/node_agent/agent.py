"""The agent: its three loops, one module each, over one small shared state (the
assignment book and the run in progress; :mod:`node_agent.agent_state`):

- heartbeat (:mod:`node_agent.heartbeat`, the caller's thread): register, then
  heartbeat every interval the orchestrator asks for; new assignments go into the
  book, cancellations stop runs;
- executor (:mod:`node_agent.executor`): starts the earliest due assignment, one at a
  time, and turns its outcome into state reports (outbox) and a result bundle (spool);
- sender (:mod:`node_agent.sender`): delivers state reports in order, then uploads
  bundles whose reports are out.

When the orchestrator is unreachable the heartbeat keeps trying, the executor keeps
running what the book holds (a day of schedule: the orchestrator's hand-out horizon),
holding each SIM to its cap with a local account (:mod:`node_agent.sim_account`), and
the sender keeps reports and bundles on disk until it returns ("offline nodes keep
measuring what they already hold and upload later").
"""

from __future__ import annotations

import logging
import threading

from node_agent.executor import EXECUTOR_IDLE_S, ExecutorLoop
from node_agent.faults import disarm_all
from node_agent.heartbeat import EAGER_BEATS, RESTART_LOST, STARTING, HeartbeatLoop
from node_agent.sender import SENDER_IDLE_S, SenderLoop
from testbed_common.states import RunState

__all__ = ["EAGER_BEATS", "EXECUTOR_IDLE_S", "RESTART_LOST", "SENDER_IDLE_S", "STARTING",
           "Agent"]

log = logging.getLogger(__name__)


class Agent(HeartbeatLoop, ExecutorLoop, SenderLoop):
    """The node agent: its three loops (one module each) over one shared state
    (:class:`~node_agent.agent_state.AgentState`)."""

    # -- life cycle ----------------------------------------------------------------------

    def run(self) -> None:
        """Run until :meth:`stop`; returns after a last attempt to send what is pending."""
        disarm_all(self._faults_dir)
        removed = self.runner.remove_leftovers()
        if removed:
            log.warning("removed containers of an earlier agent life: %s", ", ".join(removed))
        executor = threading.Thread(target=self._executor_loop, name="executor", daemon=True)
        sender = threading.Thread(target=self._sender_loop, name="sender", daemon=True)
        executor.start()
        sender.start()
        try:
            if self._register():
                self._heartbeat_loop()
        finally:
            self._stopping.set()
            self._wake_executor.set()
            executor.join(timeout=60)
            self._wake_sender.set()
            sender.join(timeout=30)
            self._send_pending()  # last chance: the executor may have just reported
            log.info("agent stopped")

    def stop(self, why: str) -> None:
        log.info("stopping: %s", why)
        with self._lock:
            if self._current is not None:
                self._current[1].set(
                    RunState.FAILED, f"node agent stopped during the run ({why})"
                )
        self._stopping.set()
        self._wake_executor.set()
        self._wake_sender.set()

