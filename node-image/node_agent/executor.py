"""The agent's executor loop: starts the earliest due assignment, one at a time, and
turns its outcome into state reports (outbox) and a result bundle (spool). Offline, it
runs what the book holds, holding each SIM to its cap with the local account
(:mod:`node_agent.sim_account`); the steps of one run are :mod:`node_agent.execution`'s.
"""

from __future__ import annotations

import logging

from node_agent.agent_state import AgentState
from node_agent.assignments import missed_reason, save_book
from node_agent.clock import on_node_clock, orchestrator_time
from node_agent.execution import bundle_run, deploy, run_session
from node_agent.runner import RunOutcome, StopRequest
from node_agent.sim_account import save_account
from testbed_common.states import RunState
from testbed_common.wire import Assignment

log = logging.getLogger(__name__)

#: Longest sleep of the executor while waiting for the next slot, seconds.
EXECUTOR_IDLE_S = 5.0


class ExecutorLoop(AgentState):
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
        outcome = run_session(self.runner, spec, run_dir, stop=stop, report=self._report)
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

