"""The filter step of the planner: a campaign into lanes and events.

A *lane* is what gets sessions: one node, one SIM group (a SIM, or the first k SIMs
for an experiment that needs k interfaces), and the session template with its forecast
per SIM. An *event* is one occurrence window with the lanes that want it, in slots (the
j-th lane of every node in slot j, since a node's SIMs are measured in turn).

Everything that can be refused without looking at time is refused here, with a
decision: nothing selected, unknown experiment or bad parameters, a node unavailable,
a node whose architecture an image does not provide (orchestrator.scheduling.platforms),
too few interfaces, no cap configured, a cap or budget below one session, a session
longer than any window, a window that never occurs. DST skips and missed windows
(per the campaign's ``missed`` policy) are decided here too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import numpy.typing as npt

from orchestrator.model.ids import CampaignId, NodeId
from orchestrator.quotas.ledger import (
    ProjectId,
    SimKey,
    SimQuota,
    budget_refusal,
    sim_cap_refusal,
)
from orchestrator.scheduling import recurrence as rec
from orchestrator.scheduling.forecast import ForecastModel, expected_rate, forecast_run
from orchestrator.scheduling.platforms import Mismatch, first_refusal
from orchestrator.scheduling.selection import EVERYTHING, NodeFacts, Selection, SimFacts
from orchestrator.scheduling.snapshot import (
    Decision,
    DecisionKind,
    EntryStatus,
    ReasonCode,
    Snapshot,
)
from orchestrator.scheduling.spec import CampaignSpecV2, Daily, Every, StepSpec


@dataclass(frozen=True)
class RunSlot:
    """One run inside a session template."""

    step: int
    experiment: str
    parameters: Mapping[str, Any]
    repetition: int
    offset_s: int  # from the session start
    duration_s: int
    interfaces: int  # uses the group's first ``interfaces`` SIMs
    nbytes: tuple[int, ...]  # per SIM of the group (0 for SIMs it does not use)


@dataclass(frozen=True)
class Lane:
    campaign: CampaignId
    project: ProjectId
    node: NodeId
    interfaces: tuple[str, ...]
    sims: tuple[SimKey, ...]
    quotas: tuple[SimQuota, ...]
    runs: tuple[RunSlot, ...]
    length_s: int
    session_bytes: tuple[int, ...]  # per SIM

    def label(self) -> str:
        return " + ".join(s.label() for s in self.sims)


@dataclass(frozen=True)
class Event:
    start: datetime
    end: datetime
    nominal: datetime
    slots: tuple[npt.NDArray[np.int64], ...]


@dataclass
class CampaignLanes:
    project: ProjectId
    lanes: list[Lane] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)


_MISMATCH_CODE = {Mismatch.ARCHITECTURE: ReasonCode.ARCHITECTURE,
                  Mismatch.NATIVE_TOOLS: ReasonCode.NATIVE_TOOLS}


class _Refused(Exception):
    def __init__(self, code: ReasonCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def build_lanes(campaign: CampaignId, spec: CampaignSpecV2, submitted_at: datetime, *,
                snapshot: Snapshot, now: datetime, until: datetime) -> CampaignLanes:
    out = CampaignLanes(ProjectId(spec.project))

    def decide(kind: DecisionKind, code: ReasonCode, message: str, **kw: Any) -> None:
        out.decisions.append(Decision(kind, code, campaign, message, **kw))

    try:
        steps = _resolve_steps(spec, snapshot.catalogue)
        cheap = (_resolve_steps(spec, snapshot.catalogue, spec.cheap_steps())
                 if spec.proxy else None)
        chosen = _select(spec, snapshot.nodes)
    except _Refused as e:
        decide(DecisionKind.REJECTED, e.code, str(e))
        return out
    group_size = max(model.interfaces for _, _, model in steps)
    scale = rec.TimeScale(spec.time_scale, spec.time_anchor or submitted_at)
    occurrences: dict[str, rec.Occurrences | None] = {}
    group_lanes: dict[str, list[list[int]]] = {}
    templates: dict[tuple[Any, ...], tuple[tuple[RunSlot, ...], int, tuple[int, ...]]] = {}
    for node, sims in chosen:
        if node.id in snapshot.unavailable:
            decide(DecisionKind.DEFERRED, ReasonCode.NODE_UNAVAILABLE,
                   f"deferred: {node.id} is unavailable ({snapshot.unavailable[node.id]})",
                   node=node.id)
            continue
        refused = first_refusal(node, [(name, model) for name, _, model in steps])
        if refused is not None:
            decide(DecisionKind.DEFERRED, _MISMATCH_CODE[refused.kind],
                   f"deferred: {refused.message}", node=node.id)
            continue
        group = node.timezone if isinstance(spec.recurrence, Daily) else ""
        if group not in occurrences:
            occurrences[group] = _occurrences(spec, group, scale, submitted_at, now, until,
                                              lambda c, m: decide(DecisionKind.REJECTED, c, m))
        occ = occurrences[group]
        if occ is None:
            continue
        longest = max(int((w.end - w.start).total_seconds()) for w in occ.windows)
        ordered = sorted(sims, key=lambda s: s.interface)
        if len(ordered) < group_size:
            decide(DecisionKind.REJECTED, ReasonCode.TOO_FEW_INTERFACES,
                   f"{node.id}: the campaign needs {group_size} interfaces together; "
                   f"the selection leaves {len(ordered)}", node=node.id)
            continue
        sim_groups = [(s,) for s in ordered] if group_size == 1 else [tuple(ordered[:group_size])]
        slot = 0
        for sim_group in sim_groups:
            session, variant = steps, "full"
            if cheap is not None:
                sim = SimKey(node.id, sim_group[0].interface, sim_group[0].mcc_mnc)
                verdict = snapshot.proxy.get((campaign, sim))
                if verdict is not None and not verdict.needed:
                    session, variant = cheap, "cheap"
            try:
                lane = _lane(campaign, out.project, node, sim_group, (variant, session), spec,
                             snapshot, templates, decide)
            except _Refused as e:
                return CampaignLanes(out.project, decisions=[*out.decisions, Decision(
                    DecisionKind.REJECTED, e.code, campaign, str(e))])
            if lane is None:
                continue
            if lane.length_s > longest:
                decide(DecisionKind.REJECTED, ReasonCode.LONGER_THAN_WINDOW,
                       f"{lane.label()}: a session takes {lane.length_s} s but the longest "
                       f"window is {longest} s (wall clock, after time_scale); it cannot "
                       "ever run", node=node.id, sim=lane.sims[0])
                continue
            slots = group_lanes.setdefault(group, [])
            if len(slots) <= slot:
                slots.append([])
            slots[slot].append(len(out.lanes))
            out.lanes.append(lane)
            slot += 1
    if not out.lanes and not out.decisions:
        decide(DecisionKind.REJECTED, ReasonCode.NOTHING_SELECTED,
               "the selection leaves nothing to book")
    done = _done_sessions(campaign, snapshot)
    policy_skip: list[tuple[datetime, int]] = []
    for group, slot_lists in group_lanes.items():
        occ = occurrences[group]
        assert occ is not None
        slot_arrays = tuple(np.array(s, dtype=np.int64) for s in slot_lists)
        n_lanes = sum(len(s) for s in slot_lists)
        for skip in occ.skipped:
            if now <= skip.nominal < until:
                decide(DecisionKind.SKIPPED, ReasonCode.DST_GAP, f"skipped: {skip.message}",
                       count=n_lanes, first=skip.nominal, last=skip.nominal)
        for w in occ.windows:
            if w.start >= until:
                break
            lanes_here = _without_done(slot_arrays, out.lanes, done.get(w.nominal))
            if w.end > now:
                out.events.append(Event(w.start, w.end, w.nominal, lanes_here))
            elif w.start >= submitted_at:
                if spec.missed == "catch_up":
                    out.events.append(Event(now, until, w.nominal, lanes_here))
                else:
                    policy_skip.append((w.nominal, sum(len(s) for s in lanes_here)))
    missed = [(t, n) for t, n in policy_skip if n]
    if missed:
        decide(DecisionKind.SKIPPED, ReasonCode.MISSED,
               f"skipped: {sum(n for _, n in missed)} session(s) in {len(missed)} past "
               "window(s) were not run (missed: skip)",
               count=sum(n for _, n in missed), first=missed[0][0], last=missed[-1][0])
    out.events.sort(key=lambda e: (e.start, e.nominal))
    if spec.proxy is not None:
        out.events = _one_ahead(campaign, out, snapshot)
    return out


def _one_ahead(campaign: CampaignId, out: CampaignLanes, snapshot: Snapshot) -> list[Event]:
    """Proxy mode books a SIM one window ahead: none while one of its sessions is held
    (its results would change the next decision), else only its earliest open window.
    The next pass, after that session ran, decides the one after it."""
    held = {(e.session.node, e.session.interfaces) for e in snapshot.calendar
            if e.session is not None and e.session.campaign == campaign
            and e.status is EntryStatus.HELD}
    taken = {i for i, lane in enumerate(out.lanes) if (lane.node, lane.interfaces) in held}
    events = []
    for ev in out.events:
        slots = tuple(np.array([i for i in s.tolist() if i not in taken], dtype=np.int64)
                      for s in ev.slots)
        taken.update(i for s in slots for i in s.tolist())
        if any(len(s) for s in slots):
            events.append(Event(ev.start, ev.end, ev.nominal, slots))
    return events


def _resolve_steps(spec: CampaignSpecV2, catalogue: Mapping[str, ForecastModel],
                   which: list[StepSpec] | None = None
                   ) -> list[tuple[str, dict[str, Any], ForecastModel]]:
    steps = []
    for i, step in enumerate(spec.steps if which is None else which):
        model = catalogue.get(step.experiment)
        if model is None:
            raise _Refused(ReasonCode.BAD_SPEC, f"step {i}: unknown experiment "
                           f"{step.experiment!r}; the catalogue has {sorted(catalogue)}")
        try:
            steps.append((step.experiment, model.resolve_parameters(step.parameters), model))
        except ValueError as e:
            raise _Refused(ReasonCode.BAD_SPEC, f"step {i}: {e}") from e
    return steps


def _select(spec: CampaignSpecV2, nodes: Any) -> list[tuple[NodeFacts, tuple[SimFacts, ...]]]:
    selection = Selection.parse(spec.select) if spec.select else EVERYTHING
    fleet = list(nodes)
    if spec.nodes:
        known = {n.id for n in fleet}
        unknown = sorted(set(spec.nodes) - known)
        wanted = set(spec.nodes)
        fleet = [n for n in fleet if n.id in wanted]
        if unknown and not fleet:
            raise _Refused(ReasonCode.NOTHING_SELECTED,
                           f"none of the listed nodes is in the fleet ({', '.join(unknown)})")
    chosen = selection.select(fleet)
    if not chosen:
        listed = f" among the {len(fleet)} listed node(s)" if spec.nodes else ""
        raise _Refused(ReasonCode.NOTHING_SELECTED,
                       f"selection {selection.source!r} selects no SIM{listed} "
                       f"({len(list(nodes))} nodes in the fleet)")
    return chosen


def _occurrences(spec: CampaignSpecV2, tz: str, scale: rec.TimeScale, submitted: datetime,
                 now: datetime, until: datetime,
                 reject: Any) -> rec.Occurrences | None:
    r = spec.recurrence
    try:
        if isinstance(r, Daily):
            try:
                zone = ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError) as e:
                raise rec.RecurrenceError(f"unknown time zone {tz!r}") from e
            return rec.daily(window=rec.parse_window(r.window), first_day=r.first_day,
                             last_day=r.last_day, tz=zone, scale=scale)
        if isinstance(r, Every):
            return rec.every(hours=r.hours, start=r.start.astimezone(UTC),
                             end=r.end.astimezone(UTC), scale=scale)
        return rec.asap(earliest=max(now, submitted), until=until, nominal=submitted)
    except rec.RecurrenceError as e:
        reject(ReasonCode.NEVER_OCCURS, str(e) + (f" (nodes in {tz})" if tz else ""))
        return None


def _lane(campaign: CampaignId, project: ProjectId, node: NodeFacts,
          group: tuple[SimFacts, ...],
          session: tuple[str, list[tuple[str, dict[str, Any], ForecastModel]]],
          spec: CampaignSpecV2, snapshot: Snapshot,
          templates: dict[tuple[Any, ...], tuple[tuple[RunSlot, ...], int, tuple[int, ...]]],
          decide: Any) -> Lane | None:
    sims = tuple(SimKey(node.id, s.interface, s.mcc_mnc) for s in group)
    quotas = []
    for sim in sims:
        q = snapshot.quotas.sims.get(sim)
        if q is None:
            decide(DecisionKind.DEFERRED, ReasonCode.NO_QUOTA,
                   f"deferred: {sim.label()} has no data cap configured; set one to book "
                   "on it", node=node.id, sim=sim)
            return None
        quotas.append(q)
    rates = tuple(expected_rate(snapshot.history, node=node.id, mcc_mnc=s.mcc_mnc,
                                policy=snapshot.rates) for s in group)
    # Keyed by the session's variant too: a proxy campaign's cheap and full ones differ.
    variant, steps = session
    key = (variant, *(r.rate_bps for r in rates))
    if key not in templates:
        try:
            templates[key] = _template(steps, spec, rates, math.ceil(snapshot.padding_s))
        except ValueError as e:  # the manifest's expressions (ExpressionError) included
            raise _Refused(ReasonCode.BAD_SPEC, f"forecast failed on {node.id}: {e}") from e
    runs, length, nbytes = templates[key]
    for q, b in zip(quotas, nbytes, strict=True):
        if b > q.usable_bytes:
            decide(DecisionKind.REJECTED, ReasonCode.CAP_TOO_SMALL,
                   f"rejected: {sim_cap_refusal(q, 0, b).message} (one session)",
                   node=node.id, sim=q.sim)
            return None
    budget = snapshot.quotas.projects.get(project)
    if budget is not None and sum(nbytes) > budget.budget_bytes:
        decide(DecisionKind.REJECTED, ReasonCode.BUDGET_TOO_SMALL,
               f"rejected: {budget_refusal(budget, 0, sum(nbytes)).message}",
               node=node.id, sim=sims[0])
        return None
    return Lane(campaign, project, node.id, tuple(s.interface for s in group), sims,
                tuple(quotas), runs, length, nbytes)


def _template(steps: list[tuple[str, dict[str, Any], ForecastModel]], spec: CampaignSpecV2,
              rates: tuple[Any, ...], pad: int
              ) -> tuple[tuple[RunSlot, ...], int, tuple[int, ...]]:
    """Runs of one session, back to back with padding, ``pause_s`` between
    repetitions, odd repetitions reversed; its length and bytes per SIM."""
    runs: list[RunSlot] = []
    t = 0
    totals = [0] * len(rates)
    order = list(range(len(steps)))
    for rep in range(spec.repetitions):
        if rep:
            t += max(pad, math.ceil(spec.pause_s))
        for i, idx in enumerate(order if rep % 2 == 0 else order[::-1]):
            name, params, model = steps[idx]
            k = model.interfaces
            fc = [forecast_run(model, params, rate=r) for r in rates[:k]]
            duration = math.ceil(max(f.duration_s for f in fc))
            nbytes = tuple(f.volume_bytes for f in fc) + (0,) * (len(rates) - k)
            if i:
                t += pad
            runs.append(RunSlot(idx, name, params, rep, t, duration, k, nbytes))
            totals = [a + b for a, b in zip(totals, nbytes, strict=True)]
            t += duration
    return tuple(runs), t, tuple(totals)


def _done_sessions(campaign: CampaignId, snapshot: Snapshot
                   ) -> dict[datetime, set[tuple[NodeId, tuple[str, ...]]]]:
    done: dict[datetime, set[tuple[NodeId, tuple[str, ...]]]] = {}
    for e in snapshot.calendar:
        k = e.session
        if k is not None and k.campaign == campaign and e.status is not EntryStatus.FAILED:
            done.setdefault(k.occurrence, set()).add((k.node, k.interfaces))
    return done


def _without_done(slots: tuple[npt.NDArray[np.int64], ...], lanes: list[Lane],
                  done: set[tuple[NodeId, tuple[str, ...]]] | None
                  ) -> tuple[npt.NDArray[np.int64], ...]:
    if not done:
        return slots
    return tuple(np.array([i for i in s.tolist()
                           if (lanes[i].node, lanes[i].interfaces) not in done], dtype=np.int64)
                 for s in slots)
