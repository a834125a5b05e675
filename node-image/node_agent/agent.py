"""The agent's loops: heartbeat, execute, send.

Three threads share one small state (the assignment book and the run in progress):

- heartbeat (the caller's thread): register, then heartbeat every interval the
  orchestrator asks for; new assignments go into the book, cancellations stop runs;
- executor: starts the earliest due assignment, one at a time, and turns its outcome
  into state reports (outbox) and a result bundle (spool);
- sender: delivers state reports in order, then uploads bundles whose reports are out.

When the orchestrator is unreachable the heartbeat keeps trying, the executor keeps
running what the book holds (a day of schedule: the orchestrator's hand-out horizon),
holding each SIM to its cap with a local account (:mod:`node_agent.sim_account`), and
the sender keeps reports and bundles on disk until it returns ("offline nodes keep
measuring what they already hold and upload later").
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from datetime import datetime

from node_agent import __version__
from node_agent.assignments import AssignmentBook, load_book, missed_reason, save_book
from node_agent.backoff import Backoff, register_backoff
from node_agent.client import OrchestratorClient
from node_agent.clock import (
    estimate,
    load_estimate,
    on_node_clock,
    orchestrator_time,
    save_estimate,
)
from node_agent.config import AgentConfig
from node_agent.errors import (
    AgentError,
    OrchestratorUnreachable,
    Unauthorized,
)
from node_agent.execution import bundle_run, deploy, run_session
from node_agent.faults import FaultyUploads, disarm_all
from node_agent.interfaces import CounterSource, snapshot
from node_agent.metadata.sampler import MetadataSampler
from node_agent.outbox import Outbox
from node_agent.runner import Runner, RunOutcome, StopRequest, utcnow
from node_agent.sender import send_pending
from node_agent.sim_account import load_account, save_account
from node_agent.spool import Spool
from testbed_common.states import RunState
from testbed_common.wire import (
    Assignment,
    Heartbeat,
    LiveMetadata,
    Registration,
    StateReport,
)

log = logging.getLogger(__name__)

RESTART_LOST = "agent restarted during the run; experiment lost"
#: Reports that say a run is under way, not how it ended.
STARTING = frozenset({RunState.DEPLOYING, RunState.RUNNING})
#: How long the sender waits between passes when nothing wakes it, seconds.
SENDER_IDLE_S = 10.0
#: Longest sleep of the executor while waiting for the next slot, seconds.
EXECUTOR_IDLE_S = 5.0
#: Heartbeats right after registering that come at a quarter of the interval while the
#: node holds nothing (two intervals' time): its first run, often submitted as soon as
#: it is seen online (the demo, a newly provisioned node), is handed out within a
#: quarter of the interval instead of a whole one. A few extra beats per node start.
EAGER_BEATS = 8


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        client: OrchestratorClient,
        runner: Runner,
        counters: CounterSource,
        clock: Callable[[], datetime] = utcnow,
        metadata: MetadataSampler | None = None,
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.client = client
        self.runner = runner
        self.counters = counters
        self.clock = clock
        state = config.state_dir
        self.outbox = Outbox(state / "outbox")
        self.spool = Spool(state / "spool")
        #: Bundles go through the fault-injection hook (inert unless armed on the node).
        self._faults_dir = state / "faults"
        self._uploads = FaultyUploads(client, self._faults_dir)
        self.work_dir = state / "work"
        self.book_path = state / "assignments.json"
        self.book: AssignmentBook = load_book(self.book_path)
        self.account_path = state / "sim-account.json"
        self.account = load_account(self.account_path)  # under _lock
        self.heartbeat_interval_s = config.heartbeat_interval_s
        #: The last clock offset estimate, kept across restarts (node_agent.clock).
        self.clock_path = state / "clock.json"
        self.clock_estimate = load_estimate(self.clock_path)
        #: Time of the last sample of each metadata source a heartbeat delivered.
        self._metadata_sent: dict[str, str] = {}
        self._lock = threading.Lock()  # book, _current, _final_on_server
        self._send_lock = threading.Lock()  # one sender pass at a time
        self._current: tuple[str, StopRequest] | None = None
        self._final_on_server: set[str] = set()
        self._stopping = threading.Event()
        self._wake_executor = threading.Event()
        self._wake_sender = threading.Event()
        self._eager_beats = 0  # see EAGER_BEATS

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

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; True when the agent should go on."""
        return not self._stopping.wait(max(0.0, seconds))

    # -- heartbeat -----------------------------------------------------------------------

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

    # -- executor ------------------------------------------------------------------------

    def _executor_loop(self) -> None:
        while not self._stopping.is_set():
            # Slots are in orchestrator time: compare them with the corrected clock.
            now = orchestrator_time(self.clock(), self.clock_estimate)
            with self._lock:
                for missed in self.book.missed(now):
                    self.book.cancel(missed.run_id)  # reported dropped: never started
                    self._report(missed.run_id, RunState.EXPIRED, missed_reason(missed, now))
                due = self.book.next_due(now)
                wait = self.book.seconds_until_next(now)
                if due is not None:
                    self.book.take(due.run_id)
                    stop = StopRequest()
                    self._current = (due.run_id, stop)
                save_book(self.book, self.book_path)
            if due is None:
                self._wake_executor.wait(min(wait if wait is not None else 1e9, EXECUTOR_IDLE_S))
                self._wake_executor.clear()
                continue
            try:
                self.execute(due, stop)
            except Exception as e:  # one broken run must not stop the node measuring
                log.exception("run %s: unexpected error", due.run_id)
                self._report(due.run_id, RunState.FAILED,
                             f"node agent error while running it: {type(e).__name__}: {e}")
            finally:
                with self._lock:
                    self._current = None
            self._wake_sender.set()

    def execute(self, a: Assignment, stop: StopRequest) -> RunOutcome:
        """Deploy one assignment, run its session, report how it ended, bundle what it
        left (the steps are in :mod:`node_agent.execution`)."""
        with self._lock:
            over_cap = self.account.refusal(run_id=a.run_id, interface=a.interface,
                                            max_bytes=a.max_bytes)
        if over_cap is not None:
            log.error("run %s: %s", a.run_id, over_cap)
            self._report(a.run_id, RunState.FAILED, over_cap)
            return RunOutcome(RunState.FAILED, over_cap)
        clock = self.clock_estimate  # the offset this run uses, recorded in its bundle
        spec = deploy(on_node_clock(a, clock), self.config, report=self._report,
                      spool=self.spool, clock=clock)
        if isinstance(spec, RunOutcome):
            return spec  # refused, and reported
        run_dir = self.work_dir / a.run_id
        outcome = run_session(self.runner, spec, run_dir, metadata=self.metadata, stop=stop,
                              report=self._report)
        with self._lock:
            self.account = self.account.measured(run_id=a.run_id, interface=a.interface,
                                                 nbytes=outcome.bytes_used)
            save_account(self.account, self.account_path)
        with self._lock:
            final_here = a.run_id in self._final_on_server
        if not final_here:
            # The bytes metered on the interface settle the run's quota reservation;
            # None when the container never started (nothing was metered).
            measured = outcome.bytes_used if outcome.started_at is not None else None
            self._report(a.run_id, outcome.state, outcome.reason, measured_bytes=measured)
        failure = bundle_run(run_dir, run_id=a.run_id, node_id=self.config.node_id,
                             state=outcome.state, spool=self.spool)
        if failure is not None:
            self._report(a.run_id, RunState.FAILED, failure)
        return outcome

    def _report(self, run_id: str, state: RunState, reason: str, *,
                measured_bytes: int | None = None) -> None:
        self.outbox.put(run_id, StateReport(state=state, reason=reason[:2000], at=self.clock(),
                                            measured_bytes=measured_bytes))
        self._wake_sender.set()

    # -- sender --------------------------------------------------------------------------

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
