"""What the agent's three loops share (:mod:`node_agent.agent` runs them): the
assignment book and the run in progress (under ``_lock``), the outbox and the spool,
the local SIM account, the clock estimate, and the events that wake each loop. Each loop
is a mixin of this state in a module of its own: :mod:`node_agent.heartbeat`,
:mod:`node_agent.executor`, :mod:`node_agent.sender`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from node_agent.assignments import AssignmentBook, load_book
from node_agent.client import OrchestratorClient
from node_agent.clock import load_estimate
from node_agent.config import AgentConfig
from node_agent.faults import FaultyUploads
from node_agent.interfaces import CounterSource
from node_agent.metadata.sampler import MetadataSampler
from node_agent.outbox import Outbox
from node_agent.runner import Runner, StopRequest, utcnow
from node_agent.sim_account import load_account
from node_agent.spool import Spool
from testbed_common.states import RunState
from testbed_common.wire import StateReport


class AgentState:
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

    def _sleep(self, seconds: float) -> bool:
        """Sleep unless stopping; True when the agent should go on."""
        return not self._stopping.wait(max(0.0, seconds))

    def _report(self, run_id: str, state: RunState, reason: str, *,
                measured_bytes: int | None = None) -> None:
        self.outbox.put(run_id, StateReport(state=state, reason=reason[:2000], at=self.clock(),
                                            measured_bytes=measured_bytes))
        self._wake_sender.set()

