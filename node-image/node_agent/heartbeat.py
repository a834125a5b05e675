"""The agent's heartbeat loop (the caller's thread): register, then heartbeat every
interval the orchestrator asks for; new assignments go into the book, cancellations
stop runs. When the orchestrator is unreachable it keeps trying, paced, and the other
loops go on with what the node holds.
"""

from __future__ import annotations

import logging
import shutil

from node_agent import __version__
from node_agent.agent_state import AgentState
from node_agent.assignments import save_book
from node_agent.backoff import Backoff, register_backoff
from node_agent.clock import estimate, save_estimate
from node_agent.errors import AgentError, OrchestratorUnreachable, Unauthorized
from node_agent.interfaces import snapshot
from node_agent.sim_account import save_account
from testbed_common.states import RunState
from testbed_common.wire import Assignment, Heartbeat, LiveMetadata, Registration

log = logging.getLogger(__name__)

RESTART_LOST = "agent restarted during the run; experiment lost"
#: Reports that say a run is under way, not how it ended.
STARTING = frozenset({RunState.DEPLOYING, RunState.RUNNING})
#: Heartbeats right after registering that come at a quarter of the interval while the
#: node holds nothing (two intervals' time): its first run, often submitted as soon as
#: it is seen online (the demo, a newly provisioned node), is handed out within a
#: quarter of the interval instead of a whole one. A few extra beats per node start.
EAGER_BEATS = 8



class HeartbeatLoop(AgentState):
    def held_run_ids(self) -> set[str]:
        """Runs this agent still answers for: pending, running, with a bundle to send, or
        with an outcome still to report. A run whose only unsent reports say it was
        starting (deploying, running) is not held unless it runs now: it ran in an
        earlier life of the agent, killed before those reports went out, and must be
        reported lost rather than left for the deadline to fail."""
        with self._lock:
            held = set(self.book.pending_ids)
            if self._current is not None:
                held.add(self._current[0])
        outcomes = {item.run_id for item in self.outbox.pending()
                    if item.report.state not in STARTING}
        return held | outcomes | self.spool.run_ids()

    def _register(self) -> bool:
        backoff = register_backoff(self.config.max_backoff_s)
        while not self._stopping.is_set():
            body = Registration(
                agent_version=__version__,
                model=self.config.model,
                architecture=self.config.architecture,
                native_tools=self.config.native_tools,
                interfaces=snapshot(self.config, self.counters, self._detected_models()),
            )
            try:
                reply = self.client.register(body)
            except Unauthorized as e:
                log.error(
                    "registration refused: %s; retrying in %.0f s",
                    e, self.config.unauthorized_retry_s,
                )
                if not self._sleep(self.config.unauthorized_retry_s):
                    return False
                continue
            except Exception as e:  # AgentError, or a bug: never crash-loop fast
                delay = backoff.next_delay()
                # Out of contact is normal (the orchestrator starting, a train in a
                # tunnel): said, not warned about.
                log.log(logging.INFO if isinstance(e, OrchestratorUnreachable)
                        else logging.WARNING,
                        "cannot register (%s); retrying in %.1f s", e, delay,
                        exc_info=not isinstance(e, AgentError))
                if not self._sleep(delay):
                    return False
                continue
            self.heartbeat_interval_s = reply.heartbeat_interval_s
            self._eager_beats = EAGER_BEATS
            held = self.held_run_ids()
            for run_id in reply.active_run_ids:
                if run_id not in held:
                    log.warning("run %s: %s", run_id, RESTART_LOST)
                    self._report(run_id, RunState.FAILED, RESTART_LOST)
            log.info(
                "registered as %s (heartbeat every %.0f s)",
                reply.node_id, reply.heartbeat_interval_s,
            )
            return True
        return False

    def _heartbeat_loop(self) -> None:
        backoff = Backoff(max_s=self.config.max_backoff_s)
        while not self._stopping.is_set():
            with self._lock:
                running = [self._current[0]] if self._current else []
                pending = self.book.pending_ids[:1000]  # the wire's bound on id lists
                dropped = self.book.dropped_ids
            uncounted = self.outbox.run_ids() | set(running)  # see node_agent.sim_account
            sent_at = self.clock()
            metadata, marks = self._live_metadata()
            body = Heartbeat(
                sent_at=sent_at,
                interfaces=snapshot(self.config, self.counters, self._detected_models()),
                clock_offset_s=self.clock_estimate.offset_s if self.clock_estimate else None,
                disk_free_bytes=shutil.disk_usage(self.config.state_dir).free,
                running_run_ids=running,
                spooled_bundles=len(self.spool),
                metadata=metadata,
                pending_run_ids=pending,
                dropped_run_ids=dropped,
            )
            try:
                reply = self.client.heartbeat(body)
            except Unauthorized as e:
                log.error("heartbeat refused: %s; registering again", e)
                if not self._register():
                    return
                continue
            except Exception as e:  # AgentError, or a bug: keep measuring, retry paced
                delay = min(backoff.next_delay(), self.heartbeat_interval_s)
                log.log(logging.INFO if isinstance(e, OrchestratorUnreachable)
                        else logging.WARNING,
                        "heartbeat failed (%s); next try in %.0f s", e, delay,
                        exc_info=not isinstance(e, AgentError))
                self._sleep(delay)
                continue
            if backoff.failures:
                self._wake_sender.set()  # back in contact: deliver what waited, now
            backoff.reset()
            self._metadata_sent.update(marks)
            self.clock_estimate = estimate(
                sent_at=sent_at, received_at=self.clock(), server_time=reply.server_time
            )
            save_estimate(self.clock_estimate, self.clock_path)
            self.heartbeat_interval_s = reply.heartbeat_interval_s
            with self._lock:
                self.book.acknowledge_dropped(dropped)  # saved with the orders below
            self._take_orders(reply.assignments, reply.cancel_run_ids)
            with self._lock:
                self.account = self.account.contact(reply.sim_left_bytes, uncounted=uncounted)
                save_account(self.account, self.account_path)
            self._sleep(self._next_beat_s())

    def _next_beat_s(self) -> float:
        """The pause before the next heartbeat: a quarter of the interval for the first
        few after registering while the node holds nothing (EAGER_BEATS), else the
        interval."""
        with self._lock:
            idle = not self.book.pending_ids and self._current is None
        if not idle:
            self._eager_beats = 0
        if self._eager_beats <= 0:
            return self.heartbeat_interval_s
        self._eager_beats -= 1
        return self.heartbeat_interval_s / 4

    def _detected_models(self) -> dict[str, str]:
        return self.metadata.detected_models() if self.metadata is not None else {}

    def _live_metadata(self) -> tuple[LiveMetadata | None, dict[str, str]]:
        """The samples no heartbeat delivered yet, and their marks (see
        :meth:`MetadataSampler.undelivered`)."""
        if self.metadata is None:
            return None, {}
        return self.metadata.undelivered(self._metadata_sent)

    def _take_orders(self, assignments: list[Assignment], cancel_run_ids: list[str]) -> None:
        with self._lock:
            for a in self.book.offer(assignments):
                log.info(
                    "run %s: assigned (%s on %s, from %s)",
                    a.run_id, a.experiment, a.interface, a.not_before.isoformat(),
                )
            for run_id in cancel_run_ids:
                if self.book.cancel(run_id) is not None:
                    log.info("run %s: cancelled before it started", run_id)
                if self._current is not None and self._current[0] == run_id:
                    self._current[1].set(RunState.CANCELLED, "cancelled by the orchestrator")
            save_book(self.book, self.book_path)
        self._wake_executor.set()

