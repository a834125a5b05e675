"""Campaigns: a spec (version 1 or 2) accepted, planned at once, and re-planned later.

Submitting plans every campaign in the same unit of work as storing the new one, so the
reply shows the runs booked and the decisions made (deferred, skipped, rejected, with
reasons). A campaign nothing of which can ever run (its selection matches no SIM, its
window never occurs, every SIM's cap is below one session) is refused with those
reasons and nothing is stored.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from orchestrator.errors import Invalid
from orchestrator.model.ids import new_campaign_id
from orchestrator.schemas import CampaignPublic, CampaignSummary, DecisionPublic
from orchestrator.services.access import read_scope, readable_campaign
from orchestrator.services.auth import Principal
from orchestrator.services.context import Context
from orchestrator.services.planning import parse_spec, replan_in
from orchestrator.services.runs import runs_of
from orchestrator.services.users import project_for
from orchestrator.store.tables import Campaign, Project, Run

__all__ = ["get_campaign", "list_campaigns", "parse_spec", "submit_campaign"]


def submit_campaign(ctx: Context, principal: Principal, raw: dict[str, Any]) -> CampaignPublic:
    spec = parse_spec(raw)
    now = ctx.clock.now()
    with ctx.plan_lock, ctx.db.session() as s:
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
        rejected = [d["message"] for d in decisions if d["kind"] == "rejected"]
        if not booked and rejected and not any(d["kind"] == "deferred" for d in decisions):
            raise Invalid("campaign refused, nothing in it can ever run: " + "; ".join(rejected))
        return _public(s, campaign, project.name)


def _public(s: Session, campaign: Campaign, project: str) -> CampaignPublic:
    ids = s.scalars(select(Run.id).where(Run.campaign_id == campaign.id)).all()
    decisions = [DecisionPublic.model_validate(d) for d in campaign.decisions or []]
    return CampaignPublic(
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


def get_campaign(ctx: Context, principal: Principal, campaign_id: str) -> CampaignPublic:
    with ctx.db.session() as s:
        campaign = readable_campaign(s, read_scope(s, principal), campaign_id)
        project = s.get(Project, campaign.project_id)
        assert project is not None
        return _public(s, campaign, project.name)


def list_campaigns(ctx: Context, principal: Principal, *,
                   limit: int = 100) -> list[CampaignSummary]:
    """The newest campaigns of the caller's projects first, each with its runs counted
    by state and the decisions of its last planning pass (deferred, skipped, rejected)."""
    with ctx.db.session() as s:
        scope = read_scope(s, principal)
        rows = s.scalars(select(Campaign).where(scope.where(Campaign.project_id))
                         .order_by(Campaign.created_at.desc()).limit(limit)).all()
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
        ) for c in rows]
