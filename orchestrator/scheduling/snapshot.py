"""The planner's input and its vocabulary of decisions.

A :class:`Snapshot` is everything the planner may look at, frozen at ``now``: the
services build it from the database (nodes, their calendars, the quota ledger, recent
link rates, the catalogue) and the planner never reads anything else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from orchestrator.analysis.proxy import Verdict
from orchestrator.model.ids import CampaignId, NodeId
from orchestrator.quotas.ledger import LedgerState, SimKey
from orchestrator.scheduling.forecast import ForecastModel, LinkHistory, RatePolicy
from orchestrator.scheduling.selection import NodeFacts
from orchestrator.scheduling.spec import CampaignSpecV2


class EntryStatus(StrEnum):
    HELD = "held"  # scheduled, assigned or running: holds its node's time
    DONE = "done"  # ran: its session is not booked again
    FAILED = "failed"  # frees its time; its session is planned again while possible


class DecisionKind(StrEnum):
    DEFERRED = "deferred"  # may run after a re-plan (quota, node back, conflict gone)
    SKIPPED = "skipped"  # that occurrence will not run (DST gap, missed with `skip`)
    REJECTED = "rejected"  # can never run as specified: fix the spec or the quotas


class ReasonCode(StrEnum):
    NOTHING_SELECTED = "nothing_selected"
    BAD_SPEC = "bad_spec"  # unknown experiment, bad parameters, forecast fails
    NEVER_OCCURS = "never_occurs"
    NODE_UNAVAILABLE = "node_unavailable"
    TOO_FEW_INTERFACES = "too_few_interfaces"
    #: The node's architecture is not among the platforms an experiment's image
    #: provides (orchestrator.scheduling.platforms).
    ARCHITECTURE = "architecture"
    #: The experiment needs the native tools; the node has none for its architecture.
    NATIVE_TOOLS = "native_tools"
    NO_QUOTA = "no_quota"
    CAP_TOO_SMALL = "cap_too_small"
    BUDGET_TOO_SMALL = "budget_too_small"
    LONGER_THAN_WINDOW = "longer_than_window"
    NODE_BUSY = "node_busy"
    SIM_CAP = "sim_cap"
    PROJECT_BUDGET = "project_budget"
    DST_GAP = "dst_gap"
    WINDOW_SHORT = "window_short"  # that day's window (shortened by DST) is too short
    MISSED = "missed"
    #: Planning this campaign raised (a bug, or a stored spec no rule catches any
    #: more): it was skipped, and every other campaign planned without it.
    PLANNING_FAILED = "planning_failed"


@dataclass(frozen=True, order=True)
class SessionKey:
    """Names a session across re-plans; the services store it with each run."""

    campaign: CampaignId
    occurrence: datetime  # the window's nominal start (campaign time, UTC)
    node: NodeId
    interfaces: tuple[str, ...]


@dataclass(frozen=True)
class CalendarEntry:
    node: NodeId
    start: datetime
    end: datetime
    #: Shown when it blocks a campaign, e.g. "run r-20260301T0000-ab12cd34".
    owner: str
    status: EntryStatus = EntryStatus.HELD
    session: SessionKey | None = None


@dataclass(frozen=True)
class Campaign:
    id: CampaignId
    spec: CampaignSpecV2
    submitted_at: datetime


@dataclass(frozen=True)
class Snapshot:
    now: datetime
    nodes: Sequence[NodeFacts]
    catalogue: Mapping[str, ForecastModel]
    quotas: LedgerState = field(default_factory=LedgerState)
    history: LinkHistory = field(default_factory=LinkHistory)
    #: Held runs (their time is taken) and the campaign sessions already done or held
    #: (not booked again; past windows without one count as missed).
    calendar: Sequence[CalendarEntry] = ()
    #: Nodes not to book, with why ("offline since 12:03", "in maintenance").
    unavailable: Mapping[NodeId, str] = field(default_factory=dict)
    #: Gap between two runs on a node, s (settings.scheduling.padding_s).
    padding_s: float = 5.0
    rates: RatePolicy = field(default_factory=RatePolicy)
    #: Proxy-mode campaigns: per SIM, whether its calibrated TAT proxy asks for a TAT
    #: (orchestrator.analysis.proxy.tat_needed). A SIM without an entry gets a TAT.
    proxy: Mapping[tuple[CampaignId, SimKey], Verdict] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """Why something was not booked. One decision covers ``count`` sessions of one
    SIM (or a whole campaign) with one reason, from window ``first`` to ``last``."""

    kind: DecisionKind
    code: ReasonCode
    campaign: CampaignId
    message: str
    node: NodeId | None = None
    sim: SimKey | None = None
    count: int = 1
    first: datetime | None = None
    last: datetime | None = None
