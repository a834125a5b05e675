"""The quota ledger: per-SIM monthly caps and per-project budgets, in bytes.

Mobile data costs money and a SIM that passes its cap is throttled or billed, so the
scheduler reserves each run's forecast volume *before* booking it, and the agent's
measured volume settles the reservation afterwards (the rule is
:func:`orchestrator.quotas.settlement.settle`: the rest is released at once, an
overrun is recorded, never silently absorbed).

Invariant: for every SIM and period, ``used + reserved`` after a *granted* reservation
never exceeds ``usable_limit(cap, margin) = floor(cap * (1 - margin))``. Only measured
traffic (settled overruns) can push past it, and it then shows in ``overrun`` and
blocks further reservations.

Usage is not kept here between calls: the runs table is the journal (each run's
reservation and, once settled, what it was charged), and :func:`usage_from_journal`
turns its sums into the usage a :class:`LedgerState` holds.

Why a small mutable class rather than a persistent value: the planner makes millions
of reservations per plan, and copying a mapping per reservation would be quadratic.
The value-style boundary is kept where it matters: a ledger is built *from* a frozen
:class:`LedgerState` (the snapshot), and :meth:`QuotaLedger.state` returns a new frozen
state; the snapshot itself is never changed. A ledger object is confined to one
planning call or one service unit of work.

Periods: a SIM's month starts at local midnight of its reset day (clamped to the month
length, so day 31 means the last day) in the node's IANA zone. Usage is kept per
period, so rollover needs no job: a new period simply starts at zero. A reservation
carries its period, and settling charges that period even after the reset.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from enum import StrEnum
from typing import NamedTuple, NewType
from zoneinfo import ZoneInfo

from orchestrator.model.ids import NodeId

ProjectId = NewType("ProjectId", str)


class SimKey(NamedTuple):
    """A SIM as the ledger knows it: the node, the modem interface, the operator."""

    node: NodeId
    interface: str
    mcc_mnc: str

    def label(self) -> str:
        return f"SIM {self.mcc_mnc} on {self.node}/{self.interface}"


def usable_limit(cap_bytes: int, margin: float) -> int:
    """Bytes that may be reserved plus used in a period: the cap less its safety
    margin (headroom for forecast error and background traffic)."""
    return math.floor(cap_bytes * (1.0 - margin))


@dataclass(frozen=True, order=True)
class Period:
    start: datetime  # UTC
    end: datetime  # UTC, exclusive


@dataclass(frozen=True)
class SimQuota:
    sim: SimKey
    cap_bytes: int
    #: Day of month the cap resets, node local time; 29-31 mean "or the last day".
    reset_day: int = 1
    #: Fraction of the cap kept free (0.05: reservations stop at 95 %).
    margin: float = 0.05
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if self.cap_bytes < 0 or not 1 <= self.reset_day <= 31 or not 0 <= self.margin < 1:
            raise ValueError(
                f"{self.sim.label()}: cap must be >= 0, reset day 1-31, margin in [0, 1); "
                f"got {self.cap_bytes}, {self.reset_day}, {self.margin}"
            )

    @property
    def usable_bytes(self) -> int:
        return usable_limit(self.cap_bytes, self.margin)

    def period_at(self, at: datetime) -> Period:
        """The billing period holding instant ``at``."""
        tz = ZoneInfo(self.timezone)
        start = period_start(at, reset_day=self.reset_day, timezone=self.timezone)
        y, m = (start.astimezone(tz).year, start.astimezone(tz).month)
        y, m = (y, m + 1) if m < 12 else (y + 1, 1)
        return Period(start, _reset(y, m, self.reset_day, tz))


def period_start(at: datetime, *, reset_day: int, timezone: str) -> datetime:
    """When the billing period holding instant ``at`` began (UTC): the last local
    midnight of a reset day (``reset_day`` of the month, or its last day) in
    ``timezone`` at or before ``at``."""
    tz = ZoneInfo(timezone)
    local = at.astimezone(tz)
    start = _reset(local.year, local.month, reset_day, tz)
    if start > at:
        y, m = (local.year, local.month - 1) if local.month > 1 else (local.year - 1, 12)
        start = _reset(y, m, reset_day, tz)
    return start


def _reset(year: int, month: int, reset_day: int, tz: ZoneInfo) -> datetime:
    nxt = date(year + month // 12, month % 12 + 1, 1)
    day = min(reset_day, (nxt - timedelta(days=1)).day)
    # Local midnight; in the rare zones whose DST gap covers midnight, fold=0
    # lands an hour late, which is harmless for a monthly boundary.
    return datetime.combine(date(year, month, day), time(0), tzinfo=tz).astimezone(UTC)


@dataclass(frozen=True)
class ProjectBudget:
    project: ProjectId
    #: Bytes the project may move over its lifetime (all SIMs, all campaigns).
    budget_bytes: int


@dataclass(frozen=True)
class Usage:
    used: int = 0
    reserved: int = 0
    #: Measured bytes beyond what was reserved, summed over settled runs.
    overrun: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.used + other.used, self.reserved + other.reserved,
                     self.overrun + other.overrun)


@dataclass(frozen=True)
class LedgerState:
    """A frozen ledger: limits and usage. Usage of a SIM is keyed by period start."""

    sims: Mapping[SimKey, SimQuota] = field(default_factory=dict)
    projects: Mapping[ProjectId, ProjectBudget] = field(default_factory=dict)
    sim_usage: Mapping[tuple[SimKey, datetime], Usage] = field(default_factory=dict)
    project_usage: Mapping[ProjectId, Usage] = field(default_factory=dict)


@dataclass(frozen=True)
class JournalTotals:
    """Runs of one SIM, period and project, summed: the journal as the database keeps it.

    ``open_reserved`` sums reservations not settled yet; ``charged`` and ``overrun`` sum
    what :func:`orchestrator.quotas.settlement.settle` decided for the settled ones
    (stored as decided, so the sums repeat no part of the rule)."""

    sim: SimKey
    period_start: datetime
    project: ProjectId
    open_reserved: int
    charged: int
    overrun: int


def usage_from_journal(
    totals: Iterable[JournalTotals],
) -> tuple[dict[tuple[SimKey, datetime], Usage], dict[ProjectId, Usage]]:
    """Usage per (SIM, period start) and per project, for a :class:`LedgerState`: what
    settled runs were charged is used, what open reservations hold is reserved."""
    sims: dict[tuple[SimKey, datetime], Usage] = {}
    projects: dict[ProjectId, Usage] = {}
    for t in totals:
        u = Usage(t.charged, t.open_reserved, t.overrun)
        sims[(t.sim, t.period_start)] = sims.get((t.sim, t.period_start), Usage()) + u
        projects[t.project] = projects.get(t.project, Usage()) + u
    return sims, projects


class RefusalCode(StrEnum):
    NO_QUOTA = "no_quota"  # the SIM has no cap configured: refusing is the safe default
    SIM_CAP = "sim_cap"  # would pass the usable cap this period
    CAP_TOO_SMALL = "cap_too_small"  # even an empty period could not hold it
    PROJECT_BUDGET = "project_budget"
    BUDGET_TOO_SMALL = "budget_too_small"


@dataclass(frozen=True)
class Refusal:
    code: RefusalCode
    message: str
    #: Share of the cap (or budget) the request would reach, percent.
    percent: float = 0.0


@dataclass(frozen=True)
class Reservation:
    sim: SimKey
    project: ProjectId
    period_start: datetime
    nbytes: int
    #: Who holds it (a run or booking id), for reports.
    holder: str = ""


@dataclass(frozen=True)
class QuotaStatus:
    """What reports and the quota dashboard show for one SIM or project."""

    label: str
    limit: int  # the cap or budget
    usable: int  # the limit less the margin
    used: int
    reserved: int
    remaining: int  # usable - used - reserved, never below 0
    overrun: int
    period: Period | None = None


def fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def sim_cap_refusal(quota: SimQuota, committed: int, nbytes: int) -> Refusal:
    """The refusal users see when ``nbytes`` on top of ``committed`` passes the cap."""
    pct = 100.0 * (committed + nbytes) / quota.cap_bytes if quota.cap_bytes else math.inf
    if nbytes > quota.usable_bytes:
        return Refusal(
            RefusalCode.CAP_TOO_SMALL,
            f"{quota.sim.label()}: one run needs {fmt_bytes(nbytes)} but the cap allows "
            f"{fmt_bytes(quota.usable_bytes)} a month ({fmt_bytes(quota.cap_bytes)} less "
            f"{quota.margin:.0%} margin); it cannot ever run",
            pct,
        )
    return Refusal(
        RefusalCode.SIM_CAP,
        f"{quota.sim.label()} would reach {pct:.0f}% of its monthly cap "
        f"({fmt_bytes(committed + nbytes)} of {fmt_bytes(quota.cap_bytes)}; "
        f"reservations stop at {1 - quota.margin:.0%})",
        pct,
    )


def budget_refusal(budget: ProjectBudget, committed: int, nbytes: int) -> Refusal:
    pct = 100.0 * (committed + nbytes) / budget.budget_bytes if budget.budget_bytes else math.inf
    if nbytes > budget.budget_bytes:
        return Refusal(
            RefusalCode.BUDGET_TOO_SMALL,
            f"project {budget.project}: one run needs {fmt_bytes(nbytes)}, more than its "
            f"whole budget of {fmt_bytes(budget.budget_bytes)}; it cannot ever run",
            pct,
        )
    return Refusal(
        RefusalCode.PROJECT_BUDGET,
        f"project {budget.project} would reach {pct:.0f}% of its data budget "
        f"({fmt_bytes(committed + nbytes)} of {fmt_bytes(budget.budget_bytes)})",
        pct,
    )


class QuotaLedger:
    """A working copy of a :class:`LedgerState` (see the module docstring for why it
    is mutable). Not thread-safe; one per planning call or unit of work."""

    def __init__(self, state: LedgerState | None = None) -> None:
        state = state or LedgerState()
        self._sims = dict(state.sims)
        self._projects = dict(state.projects)
        self._sim_usage = dict(state.sim_usage)
        self._project_usage = dict(state.project_usage)

    def state(self) -> LedgerState:
        return LedgerState(
            dict(self._sims), dict(self._projects), dict(self._sim_usage),
            dict(self._project_usage),
        )

    def set_quota(self, quota: SimQuota) -> None:
        self._sims[quota.sim] = quota

    def set_budget(self, budget: ProjectBudget) -> None:
        self._projects[budget.project] = budget

    def check(
        self, *, sim: SimKey, project: ProjectId, nbytes: int, at: datetime
    ) -> Refusal | None:
        """Why ``nbytes`` on ``sim`` for ``project`` at ``at`` cannot be reserved, or
        None if it can. Projects without a budget are unlimited; SIMs without a cap
        are refused (data costs money: a cap must be stated)."""
        quota = self._sims.get(sim)
        if quota is None:
            return Refusal(
                RefusalCode.NO_QUOTA,
                f"{sim.label()} has no data cap configured; set one before booking on it",
            )
        u = self._sim_usage.get((sim, quota.period_at(at).start), Usage())
        if u.used + u.reserved + nbytes > quota.usable_bytes:
            return sim_cap_refusal(quota, u.used + u.reserved, nbytes)
        budget = self._projects.get(project)
        if budget is not None:
            p = self._project_usage.get(project, Usage())
            if p.used + p.reserved + nbytes > budget.budget_bytes:
                return budget_refusal(budget, p.used + p.reserved, nbytes)
        return None

    def reserve(
        self, *, sim: SimKey, project: ProjectId, nbytes: int, at: datetime, holder: str = ""
    ) -> Reservation | Refusal:
        """Reserve ``nbytes`` in the period holding ``at``, or say why not."""
        if nbytes < 0:
            raise ValueError(f"cannot reserve a negative volume ({nbytes} bytes)")
        refusal = self.check(sim=sim, project=project, nbytes=nbytes, at=at)
        if refusal is not None:
            return refusal
        period = self._sims[sim].period_at(at).start
        self.add_reserved(sims=[(sim, period, nbytes)], projects=[(project, nbytes)])
        return Reservation(sim, project, period, nbytes, holder)

    def sim_status(self, sim: SimKey, at: datetime) -> QuotaStatus:
        quota = self._sims.get(sim)
        if quota is None:
            return QuotaStatus(sim.label(), 0, 0, 0, 0, 0, 0)
        period = quota.period_at(at)
        u = self._sim_usage.get((sim, period.start), Usage())
        return QuotaStatus(
            sim.label(), quota.cap_bytes, quota.usable_bytes, u.used, u.reserved,
            max(0, quota.usable_bytes - u.used - u.reserved), u.overrun, period,
        )

    def project_status(self, project: ProjectId) -> QuotaStatus:
        p = self._project_usage.get(project, Usage())
        budget = self._projects.get(project)
        limit = budget.budget_bytes if budget else 0
        remaining = max(0, limit - p.used - p.reserved) if budget else 0
        return QuotaStatus(f"project {project}", limit, limit, p.used, p.reserved,
                           remaining, p.overrun)

    def add_reserved(
        self, *, sims: Iterable[tuple[SimKey, datetime, int]],
        projects: Iterable[tuple[ProjectId, int]],
    ) -> None:
        """Bulk-add reservations the planner granted (it checked them against the same
        limits, :func:`usable_limit` and the budgets): per (SIM, period start) and per
        project, since one SIM can serve several projects."""
        for sim, period, nbytes in sims:
            self._sim_usage[(sim, period)] = (self._sim_usage.get((sim, period), Usage())
                                              + Usage(reserved=nbytes))
        for project, nbytes in projects:
            self._project_usage[project] = (self._project_usage.get(project, Usage())
                                            + Usage(reserved=nbytes))

