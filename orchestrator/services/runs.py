"""Runs: booking, the checked state machine, and what users and agents say about them.

Every state change goes through :func:`transition`, which refuses moves the lifecycle
does not allow (a final state is never overwritten) and records a timestamped, explained
event. A late or duplicate agent report therefore cannot resurrect a run. The move is a
conditional UPDATE (from the state the caller read): when two transactions move the same
run at once (two replicas, a heartbeat and the reaper), the second finds the run moved
and gets a :class:`Conflict`, rather than overwriting the first's move.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from orchestrator.catalogue.manifest import Manifest
from orchestrator.errors import Conflict, Invalid, NotFound
from orchestrator.model.booking import adhoc_reason
from orchestrator.model.contact import cancel_holds_reservation, held_cancel_note
from orchestrator.model.ids import NodeId, new_run_id
from orchestrator.scheduling.forecast import expected_rate
from orchestrator.scheduling.platforms import Mismatch
from orchestrator.scheduling.platforms import refusal as platform_refusal
from orchestrator.scheduling.selection import NodeFacts
from orchestrator.scheduling.slots import Slot, first_free_start
from orchestrator.schemas import RunCancel, RunCreate, RunPublic
from orchestrator.services import quotas
from orchestrator.services.access import read_scope, readable_run
from orchestrator.services.auth import Principal, authenticate_node
from orchestrator.services.context import Context
from orchestrator.services.history import link_history, rate_policy
from orchestrator.services.users import project_for
from orchestrator.services.views import run_public
from orchestrator.store.tables import Node, Project, Run, RunEvent
from testbed_common import wire
from testbed_common.states import FINAL_STATES, RunState, can_move

#: States in which a run holds (or will hold) its node's time (an unreachable run may
#: still be running on its node).
BOOKED = (RunState.SCHEDULED, RunState.ASSIGNED, RunState.DEPLOYING, RunState.RUNNING,
          RunState.UNREACHABLE)
#: How many concurrent moves a ``still_from`` move follows before it gives up (each is
#: a step along the lifecycle, which is short).
_MOVES_RETRIED = 3


def transition(
    s: Session, run: Run, target: RunState, reason: str, *, source: str, at: datetime,
    still_from: Collection[RunState] = (),
) -> None:
    """Move ``run`` to ``target``, from the state read, with an event saying why.

    A concurrent transaction that moved the run first makes this a :class:`Conflict`,
    unless the state it moved the run to is in ``still_from``: the states from which
    the caller's move still stands whatever happened meanwhile (a user's cancel of a
    run the hand-out just assigned), when the move is made from there instead. A
    decision drawn from the state read (the reaper's, the hand-out's) passes none.
    """
    current = RunState(run.state)
    for _ in range(_MOVES_RETRIED + 1):
        current = RunState(run.state)
        if not can_move(current, target):
            raise Conflict(
                f"run {run.id} is {current.value} ({run.state_reason}); it cannot become "
                f"{target.value}",
                state=current.value,
            )
        if _claim_move(s, run, current, target):
            break
        if RunState(run.state) not in still_from:
            raise Conflict(
                f"run {run.id} became {run.state} ({run.state_reason}) meanwhile; it "
                f"cannot become {target.value} from {current.value}",
                state=run.state,
            )
    else:
        raise Conflict(f"run {run.id} kept moving ({run.state}); try again",
                       state=run.state)
    if current == RunState.UNREACHABLE and run.silent_since is not None:
        # Word from the node (or the horizon): its silence ends here, summed for the note.
        silent = max(0.0, (at - run.silent_since).total_seconds())
        run.out_of_contact_s = (run.out_of_contact_s or 0.0) + silent
        run.silent_since = None
    if target == RunState.CANCELLED and _cancel_holds(s, run, current):
        # Its node holds it and may run it before it learns of the cancel: the
        # reservation stays held (model.contact.cancel_holds_reservation).
        reason = f"{reason}; {held_cancel_note(run.node_id)}"
    elif target in FINAL_STATES:
        # before the move: it looks at where the run was (and, for an unreachable one,
        # at where it goes and who moves it)
        quotas.settle(s, run, at=at, target=target, by_node=source.startswith("node:"))
    run.state = target.value
    run.state_reason = reason
    run.state_at = at
    s.add(RunEvent(run_id=run.id, state=target.value, reason=reason, source=source, at=at))


def _claim_move(s: Session, run: Run, current: RunState, target: RunState) -> bool:
    """Moves the row from ``current`` only if it is still there: on PostgreSQL a
    concurrent mover holds the row until it commits, and this UPDATE then finds the
    state it wrote (SQLite has one writer, whose stale readers fail to write). False,
    with ``run`` re-read, when it was moved meanwhile."""
    moved: CursorResult[tuple[()]] = s.execute(  # type: ignore[assignment]
        update(Run).where(Run.id == run.id, Run.state == current.value)
        .values(state=target.value).execution_options(synchronize_session=False))
    if moved.rowcount == 1:
        return True
    s.refresh(run)
    return False


def _cancel_holds(s: Session, run: Run, current: RunState) -> bool:
    if run.settled_at is not None or run.reserved_bytes is None:
        return False  # nothing held to keep
    history = quotas.history_of(s, run) if current == RunState.UNREACHABLE else frozenset()
    return cancel_holds_reservation(current, history)


def _manifest(ctx: Context, name: str) -> Manifest:
    manifest = ctx.catalogue.get(name)
    if manifest is None:
        raise Invalid(f"unknown experiment {name!r}; the catalogue has {sorted(ctx.catalogue)}")
    return manifest


def _check_platform(node: Node, manifest: Manifest) -> None:
    """The planner's architecture filter, for a run booked by hand: a clear refusal
    that says what to do, rather than a run that fails on the node."""
    facts = NodeFacts(id=NodeId(node.id), country=node.country,
                      architecture=node.architecture,
                      tags=frozenset(str(t) for t in node.tags))
    refused = platform_refusal(facts, manifest.name, manifest)
    if refused is None:
        return
    if refused.kind is Mismatch.ARCHITECTURE:
        hint = ("pick a node of an architecture it provides (`testbed node list` shows "
                "each node's), or build the experiment for this one too and list it under "
                "`platforms:` in its experiment.yaml")
    else:
        hint = "pick a node that has them (`testbed node list`: no no-native-tools tag)"
    raise Invalid(f"{refused.message}; {hint}")


def node_busy(s: Session, node_id: str) -> list[Slot]:
    rows = s.execute(
        select(Run.not_before, Run.deadline).where(Run.node_id == node_id, Run.state.in_(BOOKED))
    ).all()
    return [Slot(a, b) for a, b in rows]


def book_run(
    ctx: Context,
    s: Session,
    *,
    principal: Principal,
    project: Project,
    experiment: str,
    node_id: str,
    interface: str,
    parameters: dict[str, object],
    earliest: datetime,
    campaign_id: str | None = None,
) -> Run:
    """Validate and book one run in the first free slot of its node from ``earliest``."""
    manifest = _manifest(ctx, experiment)
    try:
        resolved = manifest.resolve_parameters(parameters)
    except ValueError as e:
        raise Invalid(str(e)) from e
    node = s.get(Node, node_id)
    if node is None:
        raise Invalid(f"unknown node {node_id!r}; list them with `testbed node list`")
    _check_platform(node, manifest)
    names = [i.name for i in node.interfaces]
    if interface not in names:
        raise Invalid(
            f"node {node_id!r} has no interface {interface!r}"
            + (f"; it has {names}" if names else "; it has not registered yet")
        )
    # The link's history, as the planner forecasts (services.history): the default rate
    # only when the link has too few measurements.
    iface = next(i for i in node.interfaces if i.name == interface)
    rate = expected_rate(link_history(s, ctx.clock.now(), node=node_id), node=NodeId(node_id),
                         mcc_mnc=iface.mcc_mnc, policy=rate_policy(ctx.settings))
    duration_s, volume = manifest.forecast(resolved, rate.rate_bps)
    duration = timedelta(seconds=duration_s)
    padding = timedelta(seconds=ctx.settings.scheduling.padding_s)
    start = first_free_start(
        node_busy(s, node_id), earliest=earliest, duration=duration, padding=padding
    )
    now = ctx.clock.now()
    reservation = quotas.reserve(s, ctx.settings, node=node, interface=interface,
                                 project=project, nbytes=volume, at=start,
                                 holder=f"ad-hoc {experiment} on {node_id}/{interface}")
    run = Run(
        id=new_run_id(now),
        campaign_id=campaign_id,
        project_id=project.id,
        created_by=principal.user_id,
        node_id=node_id,
        interface=interface,
        experiment=manifest.name,
        experiment_version=manifest.version,
        image=manifest.image,
        parameters=resolved,
        not_before=start,
        deadline=start + duration,
        forecast_bytes=volume,
        state=RunState.SCHEDULED.value,
        state_reason=adhoc_reason(start, node_id, interface),
        state_at=now,
        created_at=now,
    )
    quotas.hold(run, reservation)
    s.add(run)  # its booking is its first transition, derived (model.booking)
    s.flush()
    return run


def submit_run(ctx: Context, principal: Principal, body: RunCreate) -> RunPublic:
    now = ctx.clock.now()
    # The planner's lock: a planning pass reads the calendar and the ledger, so an
    # ad-hoc booking committed in the middle of it could overlap or overbook.
    with ctx.planning() as s:
        project = project_for(s, principal, body.project)
        run = book_run(
            ctx,
            s,
            principal=principal,
            project=project,
            experiment=body.experiment,
            node_id=body.node,
            interface=body.interface,
            parameters=body.parameters,
            earliest=max(now, body.not_before or now),
        )
        return run_public(run, project.name, with_events=True)


def _project_names(s: Session) -> dict[int, str]:
    return {pid: name for pid, name in s.execute(select(Project.id, Project.name)).all()}


def list_runs(
    ctx: Context,
    principal: Principal,
    *,
    state: RunState | None = None,
    node: str | None = None,
    campaign: str | None = None,
    limit: int = 200,
) -> list[RunPublic]:
    """The newest runs of the caller's projects (every project's for an admin)."""
    with ctx.db.session() as s:
        scope = read_scope(s, principal)
        q = (select(Run).where(scope.where(Run.project_id))
             .order_by(Run.not_before.desc()).limit(limit))
        if state is not None:
            q = q.where(Run.state == state.value)
        if node is not None:
            q = q.where(Run.node_id == node)
        if campaign is not None:
            q = q.where(Run.campaign_id == campaign)
        names = _project_names(s)
        return [run_public(r, names[r.project_id]) for r in s.scalars(q).all()]


def runs_of(s: Session, ids: Sequence[str]) -> list[RunPublic]:
    names = _project_names(s)
    rows = s.scalars(select(Run).where(Run.id.in_(ids)).order_by(Run.not_before)).all()
    return [run_public(r, names[r.project_id]) for r in rows]


def get_run(ctx: Context, principal: Principal, run_id: str) -> RunPublic:
    with ctx.db.session() as s:
        run = readable_run(s, read_scope(s, principal), run_id)
        return run_public(run, _project_names(s)[run.project_id], with_events=True)


def cancel_run(ctx: Context, principal: Principal, run_id: str, body: RunCancel) -> RunPublic:
    with ctx.db.session() as s:
        # Another project's run is "not found", as in every read (services.access).
        run = readable_run(s, read_scope(s, principal), run_id)
        project = s.get(Project, run.project_id)
        assert project is not None
        project_for(s, principal, project.name)  # must be the caller's project
        transition(
            s,
            run,
            RunState.CANCELLED,
            f"{body.reason} (by {principal.name})",
            source="user",
            at=ctx.clock.now(),
            # whatever the run became meanwhile, the user wants it stopped
            still_from=frozenset(RunState),
        )
        return run_public(run, project.name, with_events=True)


def report_state(ctx: Context, token: str | None, run_id: str, body: wire.StateReport) -> None:
    """An agent's report about one of its runs."""
    with ctx.db.session() as s:
        node = authenticate_node(s, token)
        run = s.get(Run, run_id)
        if run is None or run.node_id != node.id:
            raise NotFound(f"node {node.id!r} holds no run {run_id!r}")
        if body.state == RunState.DONE:
            raise Invalid("a run becomes done when its bundle is verified; report 'uploading'")
        if RunState(run.state) == body.state:
            return  # a retried report: already recorded
        now = ctx.clock.now()
        if body.measured_bytes is not None and run.measured_bytes is None:
            run.measured_bytes = body.measured_bytes
        transition(s, run, body.state, body.reason, source=f"node:{node.id}", at=now)
        if body.state == RunState.UPLOADING:
            quotas.settle(s, run, at=now)  # its traffic is over; the bundle may wait
    if body.state in (RunState.FAILED, RunState.EXPIRED):
        ctx.replan_wanted.set()  # its session may be booked again
