"""Campaigns: a spec (version 1 or 2) accepted, planned at once, and re-planned later.

Submitting plans every campaign in the same unit of work as storing the new one, so the
reply shows the runs booked and the decisions made (deferred, skipped, rejected, with
reasons). A campaign nothing of which can ever run (its selection matches no SIM, its
window never occurs, every SIM's cap is below one session) is refused with those
reasons and nothing is stored.

Cancel and delete (owner or administrator). Cancel stops further bookings and cancels
the campaign's runs that have not started (scheduled, assigned, and unreachable ones
their node held assigned when it fell silent) through the run state machine, which
releases their quota reservations; runs that started, and their data, are kept. Delete
is for a campaign without data: it cancels, then hides the campaign from every list and
lookup; its rows stay (they are the runs' and the quota ledger's journal). A campaign
with a run that holds or may still produce data (deploying, running, uploading,
unreachable, done, or with an archived bundle) is refused: cancel it instead.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from orchestrator.errors import Conflict, Forbidden, Invalid
from orchestrator.model.contact import TOOK_UP
from orchestrator.model.ids import new_campaign_id
from orchestrator.scheduling.planner import ReasonCode
from orchestrator.scheduling.spec import check_ahead
from orchestrator.schemas import CampaignPublic, CampaignSummary, DecisionPublic
from orchestrator.services.access import read_scope, readable_campaign
from orchestrator.services.auth import Principal
from orchestrator.services.context import Context
from orchestrator.services.planning import parse_spec, replan_in
from orchestrator.services.runs import runs_of, transition
from orchestrator.services.users import project_for
from orchestrator.store.tables import Campaign, Project, Run, RunEvent, User
from testbed_common.states import RunState

__all__ = ["cancel_campaign", "delete_campaign", "get_campaign", "list_campaigns",
           "parse_spec", "submit_campaign"]

#: Runs a cancel stops: booked, not started on the node.
NOT_STARTED = (RunState.SCHEDULED, RunState.ASSIGNED)
#: Runs that hold data or may still produce some: a campaign with one is not deleted.
WITH_DATA = (RunState.DEPLOYING, RunState.RUNNING, RunState.UPLOADING, RunState.UNREACHABLE,
             RunState.DONE)


def submit_campaign(ctx: Context, principal: Principal, raw: dict[str, Any]) -> CampaignPublic:
    spec = parse_spec(raw, ctx.catalogue)
    now = ctx.clock.now()
    check_ahead(spec, now=now,
                max_ahead=timedelta(days=ctx.settings.scheduling.campaign_max_ahead_days))
    with ctx.planning() as s:
        project = project_for(s, principal, spec.project)
        campaign = Campaign(
            id=new_campaign_id(now),
            name=spec.name,
            project_id=project.id,
            created_by=principal.user_id,
            spec=spec.model_dump(mode="json"),
            created_at=now,
            planned_at=now,
            decisions=[],
        )
        s.add(campaign)
        s.flush()
        replan_in(ctx, s, now)
        booked = s.scalar(select(func.count()).select_from(Run)
                          .where(Run.campaign_id == campaign.id)) or 0
        decisions = campaign.decisions or []
        failed = [d["message"] for d in decisions
                  if d["code"] == ReasonCode.PLANNING_FAILED.value]
        if failed:  # never store what the planner cannot plan
            raise Invalid("campaign refused: " + "; ".join(failed))
        rejected = [d["message"] for d in decisions if d["kind"] == "rejected"]
        if not booked and rejected and not any(d["kind"] == "deferred" for d in decisions):
            raise Invalid("campaign refused, nothing in it can ever run: " + "; ".join(rejected))
        return _public(s, campaign, project.name)


def _owner(s: Session, campaign: Campaign) -> str:
    user = s.get(User, campaign.created_by)
    return user.name if user else "?"


def _public(s: Session, campaign: Campaign, project: str) -> CampaignPublic:
    ids = s.scalars(select(Run.id).where(Run.campaign_id == campaign.id)).all()
    decisions = [DecisionPublic.model_validate(d) for d in campaign.decisions or []]
    return CampaignPublic(
        owner=_owner(s, campaign),
        cancelled_at=campaign.cancelled_at,
        cancel_reason=campaign.cancel_reason,
        id=campaign.id,
        name=campaign.name,
        project=project,
        created_at=campaign.created_at,
        runs=runs_of(s, list(ids)),
        skipped=[d.message for d in decisions if d.kind != "deferred"],
        spec=campaign.spec,
        planned_at=campaign.planned_at,
        decisions=decisions,
    )


def _visible(s: Session, principal: Principal, campaign_id: str) -> Campaign:
    """The campaign if the caller may read it (a deleted one is nobody's): NotFound
    otherwise, the same for another project's as for an unknown id."""
    return readable_campaign(s, read_scope(s, principal), campaign_id)


def _project_name(s: Session, campaign: Campaign) -> str:
    project = s.get(Project, campaign.project_id)
    assert project is not None
    return project.name


def get_campaign(ctx: Context, principal: Principal, campaign_id: str) -> CampaignPublic:
    with ctx.db.session() as s:
        campaign = _visible(s, principal, campaign_id)
        return _public(s, campaign, _project_name(s, campaign))


def _may_change(s: Session, principal: Principal, campaign: Campaign, verb: str) -> None:
    if not (principal.is_admin or campaign.created_by == principal.user_id):
        raise Forbidden(f"only its owner ({_owner(s, campaign)}) or an administrator may "
                        f"{verb} campaign {campaign.id}")


def _cancel(s: Session, campaign: Campaign, principal: Principal, now: datetime) -> None:
    """Stop planning it, and cancel its runs that have not started (their reservations
    are released by the run state machine, services.runs.transition -> quotas.settle;
    those already handed to their node once it confirms it dropped them:
    model.contact.cancel_holds_reservation)."""
    reason = f"campaign cancelled by {principal.name}"
    if campaign.cancelled_at is None:
        campaign.cancelled_at = now
        campaign.cancel_reason = reason
    pending = s.scalars(select(Run).where(
        Run.campaign_id == campaign.id,
        Run.state.in_((*NOT_STARTED, RunState.UNREACHABLE)))).all()
    for run in pending:
        if run.state == RunState.UNREACHABLE and _took_up(s, run):
            continue  # it started on its node: its data is awaited, not cancelled
        # a run handed out meanwhile is still not started: cancelled all the same
        transition(s, run, RunState.CANCELLED, reason, source="user", at=now,
                   still_from=NOT_STARTED)


def _took_up(s: Session, run: Run) -> bool:
    """Whether the run's node took it up (an unreachable run may be one its node held
    assigned when it fell due: not started, as far as anyone knows, so a cancel stops
    it; should it have run offline all the same, its bundle is kept, services.uploads)."""
    seen = s.scalars(select(RunEvent.state).where(RunEvent.run_id == run.id)).all()
    return bool(TOOK_UP & {RunState(x) for x in seen})


def cancel_campaign(ctx: Context, principal: Principal, campaign_id: str) -> CampaignPublic:
    """Cancel (idempotent: a second cancel changes nothing and says the same)."""
    now = ctx.clock.now()
    with ctx.planning() as s:  # no planning pass books it meanwhile
        campaign = _visible(s, principal, campaign_id)
        _may_change(s, principal, campaign, "cancel")
        _cancel(s, campaign, principal, now)
        s.flush()
        return _public(s, campaign, _project_name(s, campaign))


def delete_campaign(ctx: Context, principal: Principal, campaign_id: str) -> None:
    """Cancel and hide a campaign without data; refuse (Conflict) one with data."""
    now = ctx.clock.now()
    with ctx.planning() as s:
        campaign = _visible(s, principal, campaign_id)
        _may_change(s, principal, campaign, "delete")
        held = Counter(s.scalars(select(Run.state).where(
            Run.campaign_id == campaign.id,
            or_(Run.state.in_(WITH_DATA), Run.bundle_sha256.is_not(None)))).all())
        if held:
            states = ", ".join(f"{n} {state}" for state, n in sorted(held.items()))
            raise Conflict(
                f"campaign {campaign.id} has {sum(held.values())} run(s) with data or still "
                f"producing it ({states}); archived data is never dropped, so it cannot be "
                f"deleted: cancel it instead (testbed campaign cancel {campaign.id}), which "
                "keeps them", code="campaign_has_data")
        _cancel(s, campaign, principal, now)
        campaign.deleted_at = now


def list_campaigns(ctx: Context, principal: Principal, *,
                   limit: int = 100) -> list[CampaignSummary]:
    """The newest campaigns of the caller's projects first, each with its runs counted
    by state and the decisions of its last planning pass (deferred, skipped, rejected)."""
    with ctx.db.session() as s:
        scope = read_scope(s, principal)
        rows = s.scalars(select(Campaign)
                         .where(scope.where(Campaign.project_id), Campaign.deleted_at.is_(None))
                         .order_by(Campaign.created_at.desc()).limit(limit)).all()
        users = {u.id: u.name for u in s.scalars(select(User)).all()}
        projects = {p.id: p.name for p in s.scalars(select(Project)).all()}
        counts: dict[str, dict[str, int]] = {}
        for campaign_id, state, n in s.execute(
                select(Run.campaign_id, Run.state, func.count())
                .where(Run.campaign_id.in_([c.id for c in rows]))
                .group_by(Run.campaign_id, Run.state)).all():
            counts.setdefault(str(campaign_id), {})[str(state)] = int(n)
        return [CampaignSummary(
            id=c.id, name=c.name, project=projects.get(c.project_id, "?"),
            created_at=c.created_at, planned_at=c.planned_at, runs=counts.get(c.id, {}),
            decisions=[DecisionPublic.model_validate(d) for d in c.decisions or []],
            owner=users.get(c.created_by, "?"), cancelled_at=c.cancelled_at,
            cancel_reason=c.cancel_reason,
        ) for c in rows]
