"""The campaign planner: ``plan(snapshot, campaigns, horizon=...) -> Plan``.

A pure function from a frozen :class:`Snapshot` (nodes, calendars, quota ledger, link
history, catalogue, now) to a :class:`Plan` (bookings, decisions, the ledger after its
reservations). No clock, no database: re-planning after a node goes offline, a quota
change or a failed run is calling ``plan`` again with a new snapshot; sessions already
held or done (calendar entries carrying their :class:`SessionKey`) are not booked again.

Pipeline, each rejection a :class:`Decision` with a :class:`ReasonCode` and a message:

- filter: parse the selection, drop unavailable nodes, resolve parameters, forecast
  each session per SIM (link history), refuse what can never run (a cap or budget
  below one session, a session longer than every window, a window that never occurs);
- rank: idle campaigns last, then higher priority, then earlier submission;
- select: :mod:`orchestrator.scheduling.placement` places sessions window by window.

Campaigns are isolated: one whose filter or placement raises is skipped with a
``planning_failed`` decision naming the error, its partial placement rolled back, and
every other campaign is planned as if it were absent. A stored campaign can then never
stop planning (or submission, which plans) for everyone.

A *session* is one occurrence on one SIM group of one node: the steps repeated
``repetitions`` times, in order on even repetitions and reversed on odd ones, padding
between runs and ``pause_s`` between repetitions. It is booked whole or not at all, so
an ABw-TAT-ABw triple is never split. Single-interface experiments give one session per
selected SIM (measured one after another: one experiment holds a node at a time); an
experiment that needs k interfaces uses the node's first k selected SIMs together.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from orchestrator.model.ids import NodeId
from orchestrator.quotas.ledger import (
    LedgerState,
    ProjectId,
    QuotaLedger,
    Reservation,
    SimKey,
    fmt_bytes,
)
from orchestrator.scheduling.bounds import shift
from orchestrator.scheduling.lanes import CampaignLanes, Lane, build_lanes
from orchestrator.scheduling.placement import (
    BusyCalendar,
    Code,
    LaneTable,
    Outcome,
    QuotaBook,
    place_slot,
)
from orchestrator.scheduling.snapshot import (
    CalendarEntry,
    Campaign,
    Decision,
    DecisionKind,
    EntryStatus,
    ReasonCode,
    SessionKey,
    Snapshot,
)

__all__ = [
    "Booking", "CalendarEntry", "Campaign", "Decision", "DecisionKind", "EntryStatus",
    "Plan", "ReasonCode", "SessionKey", "Snapshot", "failed", "plan", "rank",
]

I32 = npt.NDArray[np.int32]


@dataclass(frozen=True)
class Booking:
    """One run: what the services turn into a ``Run`` row (one per interface)."""

    session: SessionKey
    step: int  # index into the spec's steps
    experiment: str
    parameters: Mapping[str, Any]
    repetition: int
    node: NodeId
    interfaces: tuple[str, ...]
    start: datetime
    end: datetime
    forecast_bytes: int  # per interface
    reservations: tuple[Reservation, ...]


@dataclass(frozen=True)
class Plan:
    """Bookings are stored as arrays (21 M sessions would not fit as objects) and
    materialised by :meth:`bookings`; decisions are aggregated per SIM and reason."""

    decisions: tuple[Decision, ...]
    quotas: LedgerState  # the snapshot's ledger plus every granted reservation
    base: datetime
    lanes: tuple[Lane, ...]
    session_lane: I32
    session_start: I32  # s after base
    session_occurrence: I32  # s after base (the window's nominal start)

    @property
    def session_count(self) -> int:
        return len(self.session_lane)

    def __len__(self) -> int:
        runs = np.array([len(lane.runs) for lane in self.lanes], dtype=np.int64)
        return int(runs[self.session_lane].sum()) if self.lanes else 0

    def before(self, until: datetime) -> Plan:
        """The sessions that start before ``until`` (the day being booked of a longer
        plan), cut with numpy; decisions and the ledger are the whole plan's."""
        keep = self.session_start < int((until - self.base).total_seconds())
        return replace(self, session_lane=self.session_lane[keep],
                       session_start=self.session_start[keep],
                       session_occurrence=self.session_occurrence[keep])

    def by_lane(self) -> Iterator[tuple[Lane, I32, I32]]:
        """Each lane with its sessions' starts and occurrences (s after ``base``),
        earliest first: the columns a writer streams without a :class:`Booking` per run."""
        order = np.lexsort((self.session_start, self.session_lane))
        lane, start, occ = (a[order] for a in (self.session_lane, self.session_start,
                                               self.session_occurrence))
        cuts = np.flatnonzero(lane[1:] != lane[:-1]) + 1
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(lane)], strict=True):
            if a < b:
                yield self.lanes[int(lane[a])], start[a:b], occ[a:b]

    def bookings(self) -> Iterator[Booking]:
        order = np.lexsort((self.session_start, self.session_lane))
        for i in order:
            yield from self._session(int(i))

    def _session(self, i: int) -> Iterator[Booking]:
        lane = self.lanes[int(self.session_lane[i])]
        start = self.base + timedelta(seconds=int(self.session_start[i]))
        key = SessionKey(lane.campaign, self.base + timedelta(
            seconds=int(self.session_occurrence[i])), lane.node, lane.interfaces)
        periods = [lane.quotas[k].period_at(start).start for k in range(len(lane.sims))]
        for run in lane.runs:
            at = start + timedelta(seconds=run.offset_s)
            holder = f"{lane.campaign}/{key.occurrence:%Y%m%dT%H%M}/{run.step}.{run.repetition}"
            yield Booking(
                key, run.step, run.experiment, run.parameters, run.repetition, lane.node,
                lane.interfaces[: run.interfaces], at, at + timedelta(seconds=run.duration_s),
                run.nbytes[0] if run.nbytes else 0,
                tuple(Reservation(lane.sims[k], lane.project, periods[k], run.nbytes[k], holder)
                      for k in range(run.interfaces)),
            )


_SECOND = timedelta(seconds=1)

_OUTCOME_REASON = {
    Code.NODE_BUSY: (DecisionKind.DEFERRED, ReasonCode.NODE_BUSY),
    Code.WINDOW_PASSED: (DecisionKind.SKIPPED, ReasonCode.MISSED),
    Code.WINDOW_SHORT: (DecisionKind.SKIPPED, ReasonCode.WINDOW_SHORT),
    Code.SIM_CAP: (DecisionKind.DEFERRED, ReasonCode.SIM_CAP),
    Code.PROJECT_BUDGET: (DecisionKind.DEFERRED, ReasonCode.PROJECT_BUDGET),
}


def rank(campaigns: Sequence[Campaign]) -> list[Campaign]:
    """Idle campaigns last; then higher priority first; then earlier submission."""
    return sorted(campaigns, key=lambda c: (c.spec.recurrence.kind == "idle",
                                            -c.spec.priority, c.submitted_at, c.id))


def failed(campaign: Campaign, error: BaseException) -> Decision:
    """The decision for a campaign whose planning raised ``error``."""
    return Decision(
        DecisionKind.SKIPPED, ReasonCode.PLANNING_FAILED, campaign.id,
        f"skipped: planning this campaign failed ({type(error).__name__}: "
        f"{str(error)[:300]}); the "
        "other campaigns were planned without it. Cancel or delete it, or fix its spec "
        "and submit it again")


def plan(snapshot: Snapshot, campaigns: Sequence[Campaign], *, horizon: timedelta) -> Plan:
    """Book ``campaigns`` from ``snapshot.now`` to ``now + horizon``."""
    return _Planner(snapshot, horizon).run(rank(campaigns))


class _Planner:
    def __init__(self, snapshot: Snapshot, horizon: timedelta) -> None:
        self.snap = snapshot
        self.now = snapshot.now.astimezone(UTC)
        self.until = shift(self.now, horizon)
        held = [e for e in snapshot.calendar if e.status is EntryStatus.HELD]
        earliest = min([self.now, *(e.start for e in held)])
        self.base = (earliest - timedelta(days=1)).replace(microsecond=0)
        self.pad = math.ceil(snapshot.padding_s)
        self.node_index = {n.id: i for i, n in enumerate(snapshot.nodes)}
        self.owners: list[str] = []
        known = [e for e in held if e.node in self.node_index]
        self.busy = BusyCalendar.build(
            np.array([self.node_index[e.node] for e in known], dtype=np.int64),
            np.array([self.rel(e.start) for e in known], dtype=np.int64),
            np.array([self.rel_up(e.end) for e in known], dtype=np.int64),
            np.array([self.owner(e.owner) for e in known], dtype=np.int64),
        )
        self.ledger = QuotaLedger(snapshot.quotas)
        self.decisions: list[Decision] = []
        self.lanes: list[Lane] = []
        self.sessions: list[tuple[I32, I32, I32]] = []
        self.sim_index: dict[SimKey, int] = {}
        self.project_spent: dict[ProjectId, int] = {}

    def rel(self, t: datetime) -> int:
        """Whole seconds from the base, rounded down: where a window or the horizon
        ends, where a busy interval begins."""
        return (t - self.base) // _SECOND

    def rel_up(self, t: datetime) -> int:
        """Whole seconds from the base, rounded up: where a window opens (and now, the
        earliest start), where a busy interval ends. A session booked at a window's
        start, rounded down, would start before its window: under a compressed
        campaign clock (``time_scale``) a second early is minutes of campaign time, and
        its results would be written in the previous hour."""
        return -((self.base - t) // _SECOND)

    def owner(self, label: str) -> int:
        self.owners.append(label)
        return len(self.owners) - 1

    def run(self, campaigns: list[Campaign]) -> Plan:
        work: list[tuple[Campaign, CampaignLanes]] = []
        for c in campaigns:
            try:
                w = build_lanes(c.id, c.spec, c.submitted_at, snapshot=self.snap,
                                now=self.now, until=self.until)
            except Exception as e:  # isolate: see the module docstring
                self.decisions.append(failed(c, e))
                continue
            work.append((c, w))
            self.decisions.extend(w.decisions)
        self.quota = self._quota_book([lane for _, w in work for lane in w.lanes])
        for i, (campaign, w) in enumerate(work):
            if w.lanes:
                self._place_isolated(campaign, w, last=i == len(work) - 1)
        return self._plan()

    def _place_isolated(self, campaign: Campaign, w: CampaignLanes, *, last: bool) -> None:
        """:meth:`_place`, or, if it raises, nothing: what it changed is restored."""
        saved = (len(self.lanes), len(self.sessions), len(self.decisions),
                 dict(self.project_spent), self.quota.committed.copy(), self.busy)
        try:
            self._place(campaign, w, last=last)
        except Exception as e:  # isolate: see the module docstring
            n_lanes, n_sessions, n_decisions, spent, committed, busy = saved
            del self.lanes[n_lanes:], self.sessions[n_sessions:]
            del self.decisions[n_decisions:]
            self.project_spent, self.busy = spent, busy
            self.quota.committed[...] = committed
            self.decisions.append(failed(campaign, e))

    def _quota_book(self, lanes: list[Lane]) -> QuotaBook:
        """Arrays for every SIM the lanes touch: usable limit, period bounds covering
        now..until, and the committed bytes the snapshot already holds per period."""
        quotas = {q.sim: q for lane in lanes for q in lane.quotas}
        bounds_cache: dict[tuple[str, int], list[datetime]] = {}
        rows: list[list[datetime]] = []
        for sim, q in quotas.items():
            self.sim_index[sim] = len(rows)
            key = (q.timezone, q.reset_day)
            if key not in bounds_cache:
                p = q.period_at(self.now)
                starts = [p.start]
                while p.end <= self.until:
                    p = q.period_at(p.end)
                    starts.append(p.start)
                bounds_cache[key] = [*starts, p.end]
            rows.append(bounds_cache[key])
        width = max((len(r) for r in rows), default=1)
        far = self.rel(self.until) + 10**9
        bounds = np.full((len(rows), width), far, dtype=np.int64)
        committed = np.zeros((len(rows), width - 1), dtype=np.int64)
        state = self.snap.quotas.sim_usage
        for i, (sim, row) in enumerate(zip(quotas, rows, strict=True)):
            bounds[i, : len(row)] = [self.rel(t) for t in row]
            for j, start in enumerate(row[:-1]):
                u = state.get((sim, start))
                if u is not None:
                    committed[i, j] = u.used + u.reserved
        self.initial = committed.copy()
        self.periods = rows
        self.quotas = list(quotas.values())
        return QuotaBook(
            np.array([q.usable_bytes for q in quotas.values()], dtype=np.int64),
            np.array([q.cap_bytes for q in quotas.values()], dtype=np.int64),
            bounds, committed,
        )

    def _place(self, campaign: Campaign, w: CampaignLanes, *, last: bool) -> None:
        offset = len(self.lanes)
        self.lanes.extend(w.lanes)
        width = max(len(lane.sims) for lane in w.lanes)
        sims = np.full((len(w.lanes), width), -1, dtype=np.int64)
        nbytes = np.zeros((len(w.lanes), width), dtype=np.int64)
        for i, lane in enumerate(w.lanes):
            for k, sim in enumerate(lane.sims):
                sims[i, k] = self.sim_index[sim]
                nbytes[i, k] = lane.session_bytes[k]
        table = LaneTable(
            np.array([self.node_index[lane.node] for lane in w.lanes], dtype=np.int64),
            np.array([lane.length_s for lane in w.lanes], dtype=np.int64),
            sims, nbytes, nbytes.sum(axis=1),
        )
        budget_cfg = self.snap.quotas.projects.get(w.project)
        used = self.snap.quotas.project_usage.get(w.project)
        committed0 = (used.used + used.reserved) if used else 0
        free = np.full(len(self.snap.nodes), -(1 << 40), dtype=np.int64)
        me = self.owner(f"campaign {campaign.id} ({campaign.spec.name!r}, "
                        f"priority {campaign.spec.priority})")
        outcomes: list[Outcome] = []
        now = self.rel_up(self.now)
        first_session = len(self.sessions)
        for ev in w.events:
            for slot in ev.slots:
                spent = self.project_spent.get(w.project, 0)
                budget = (budget_cfg.budget_bytes, committed0 + spent) if budget_cfg else None
                out, charged = place_slot(
                    slot, table=table, window=(self.rel_up(ev.start), self.rel(ev.end), now),
                    free=free, busy=self.busy, quota=self.quota, budget=budget, pad=self.pad,
                )
                self.project_spent[w.project] = spent + charged
                ok = out.code == Code.GRANTED
                occ = np.full(int(ok.sum()), self.rel(ev.nominal), dtype=np.int32)
                self.sessions.append(((out.lanes[ok] + offset).astype(np.int32),
                                      out.start[ok].astype(np.int32), occ))
                if not ok.all():
                    outcomes.append(Outcome(out.lanes[~ok], np.full(int((~ok).sum()),
                                    self.rel(ev.nominal)), out.code[~ok], out.percent[~ok],
                                    out.blocker[~ok]))
        self.decisions.extend(self._aggregate(campaign, w, outcomes, me))
        mine = self.sessions[first_session:]
        if not last and mine:
            lanes = np.concatenate([g[0] for g in mine]).astype(np.int64) - offset
            starts = np.concatenate([g[1] for g in mine]).astype(np.int64)
            self.busy = self.busy.with_intervals(
                table.node[lanes], starts, starts + table.length[lanes],
                np.full(len(lanes), me, dtype=np.int64))

    def _aggregate(self, campaign: Campaign, w: CampaignLanes, outcomes: list[Outcome],
                   me: int) -> list[Decision]:
        """One decision per (lane, reason): count, first and last occurrence, and the
        details of the first (the share of the cap it would reach, who held the node)."""
        if not outcomes:
            return []
        lane = np.concatenate([o.lanes for o in outcomes])
        when = np.concatenate([o.start for o in outcomes])  # nominal times here
        code = np.concatenate([o.code for o in outcomes])
        pct = np.concatenate([o.percent for o in outcomes])
        blocker = np.concatenate([o.blocker for o in outcomes])
        order = np.lexsort((when, code, lane))
        lane, when, code, pct, blocker = (a[order] for a in (lane, when, code, pct, blocker))
        head = np.ones(len(lane), dtype=bool)
        head[1:] = (lane[1:] != lane[:-1]) | (code[1:] != code[:-1])
        starts = np.flatnonzero(head)
        ends = np.append(starts[1:], len(lane))
        out = []
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            ln = w.lanes[int(lane[a])]
            kind, reason = _OUTCOME_REASON[int(code[a])]
            first = self.base + timedelta(seconds=int(when[a]))
            last = self.base + timedelta(seconds=int(when[b - 1]))
            n = b - a
            span = (f"{n} session(s), windows {first:%Y-%m-%d %H:%M} to "
                    f"{last:%Y-%m-%d %H:%M} UTC")
            who = f"{ln.label()}"
            if reason is ReasonCode.NODE_BUSY:
                by = int(blocker[a])
                what = ("its own sessions on the node's other SIMs" if by in (-1, me)
                        else self.owners[by])
                msg = f"deferred: {ln.node} is busy with {what}; {who}: {span}"
            elif reason is ReasonCode.SIM_CAP:
                q = ln.quotas[0]
                msg = (f"deferred: {q.sim.label()} would reach {pct[a]:.0f}% of its monthly "
                       f"cap ({fmt_bytes(q.cap_bytes)}; reservations stop at "
                       f"{1 - q.margin:.0%}); {span}")
            elif reason is ReasonCode.PROJECT_BUDGET:
                msg = (f"deferred: project {w.project} would reach {pct[a]:.0f}% of its "
                       f"data budget; {who}: {span}")
            elif reason is ReasonCode.MISSED:
                msg = f"skipped: the window passed before the session could fit; {who}: {span}"
            else:
                msg = (f"skipped: the window that day is shorter than the {ln.length_s} s "
                       f"session; {who}: {span}")
            out.append(Decision(kind, reason, campaign.id, msg, ln.node,
                                ln.sims[0] if ln.sims else None, n, first, last))
        return out

    def _plan(self) -> Plan:
        delta = self.quota.committed - self.initial
        sims = [(q.sim, self.periods[i][p], int(delta[i, p]))
                for i, q in enumerate(self.quotas) for p in np.flatnonzero(delta[i]).tolist()]
        self.ledger.add_reserved(sims=sims, projects=list(self.project_spent.items()))
        if self.sessions:
            lane, start, occ = (np.concatenate([s[k] for s in self.sessions]) for k in range(3))
        else:
            lane = start = occ = np.zeros(0, dtype=np.int32)
        return Plan(tuple(self.decisions), self.ledger.state(), self.base, tuple(self.lanes),
                    lane, start, occ)

