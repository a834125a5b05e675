"""What the agent owes the orchestrator, sent in order: state reports first (a run's
bundle waits until its reports are through), then bundles, oldest first. One pass;
:class:`SenderLoop`, the agent's sender loop, paces the passes: it delivers what the
node owes whenever woken, and keeps it on disk while the orchestrator is away."""

from __future__ import annotations

import logging
from collections.abc import Callable

from node_agent.agent_state import AgentState
from node_agent.backoff import Backoff
from node_agent.client import OrchestratorClient
from node_agent.errors import (
    NotFound,
    OrchestratorUnreachable,
    ProtocolError,
    Rejected,
    RunFinal,
    Unauthorized,
)
from node_agent.outbox import Outbox
from node_agent.spool import Spool
from node_agent.uploader import UploadApi, upload
from testbed_common.states import RunState

log = logging.getLogger(__name__)

#: How long the sender waits between passes when nothing wakes it, seconds.
SENDER_IDLE_S = 10.0


def send_pending(
    *, client: OrchestratorClient, uploads: UploadApi, outbox: Outbox, spool: Spool,
    chunk_bytes: int, on_final: Callable[[str], None],
) -> bool:
    """One pass over the outbox, then the spool; False when the orchestrator is away.
    ``on_final(run_id)``: the orchestrator holds that run final already."""
    try:
        flush_outbox(client, outbox, on_final=on_final)
        waiting = outbox.run_ids()
        for item in spool.pending():
            if item.run_id in waiting:
                continue  # its state reports go first
            upload(uploads, spool, item, chunk_bytes=chunk_bytes)
    except (OrchestratorUnreachable, Unauthorized, ProtocolError) as e:
        log.warning("cannot send to the orchestrator now (%s); will retry", e)
        return False
    except Exception:  # a bug must not stop uploads for good: retry, paced
        log.exception("unexpected error while sending; will retry")
        return False
    return True


def flush_outbox(client: OrchestratorClient, outbox: Outbox, *,
                 on_final: Callable[[str], None]) -> None:
    for item in outbox.pending():
        try:
            client.report_state(item.run_id, item.report)
        except RunFinal as e:
            log.warning("%s; not reporting it again", e)
            outbox.drop_run(item.run_id)
            on_final(item.run_id)
            continue
        except (NotFound, Rejected) as e:
            log.error("run %s: state report %s refused: %s", item.run_id,
                      item.report.state, e)
        outbox.remove(item)


class SenderLoop(AgentState):
    """The sender loop: delivers state reports in order, then uploads bundles whose
    reports are out."""

    def _sender_loop(self) -> None:
        backoff = Backoff(max_s=self.config.max_backoff_s)
        while not self._stopping.is_set():
            self._wake_sender.clear()
            if self._send_pending():
                backoff.reset()
                self._wake_sender.wait(SENDER_IDLE_S)
            else:
                self._wake_sender.wait(backoff.next_delay())

    def _send_pending(self) -> bool:
        with self._send_lock:
            return send_pending(client=self.client, uploads=self._uploads, outbox=self.outbox,
                                spool=self.spool, chunk_bytes=self.config.chunk_bytes,
                                on_final=self._run_final_on_server)

    def _run_final_on_server(self, run_id: str) -> None:
        with self._lock:
            self._final_on_server.add(run_id)
            del_current = self._current is not None and self._current[0] == run_id
            if del_current and self._current is not None:
                self._current[1].set(
                    RunState.FAILED, "run is already final on the orchestrator; stopped"
                )
            self.book.cancel(run_id)
