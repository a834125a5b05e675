"""Who may read what: the one place that turns a caller into a read filter.

The model (docs/security.md, "Authorization"): measurements belong to projects. A user
reads the runs, bundles, results and campaigns of the projects they are a member of;
an administrator reads everything. Nodes never reach these reads (their token is not a
user token; the agent API gives a node only its own runs). Unknown and forbidden answer
the same 404, so an id from another project says nothing about whether it exists.
Fleet facts (nodes, their SIMs and data plans, the experiment catalogue) are shared
infrastructure and readable by every signed-in user; a project's data budget only by
its members.

:func:`scope_of` decides (pure); :func:`read_scope` reads the caller's memberships and
calls it; the services apply the scope to their queries with :meth:`ReadScope.where`
or check one row with :meth:`ReadScope.allows`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import ColumnElement, select, true
from sqlalchemy.orm import InstrumentedAttribute, Session

from orchestrator.errors import NotFound
from orchestrator.services.auth import Principal
from orchestrator.services.context import Context
from orchestrator.store.tables import Campaign, ProjectMember, Run


@dataclass(frozen=True)
class ReadScope:
    """The projects whose data a caller may read: all (``project_ids`` None) or these."""

    project_ids: frozenset[int] | None

    @property
    def everything(self) -> bool:
        return self.project_ids is None

    def allows(self, project_id: int) -> bool:
        return self.project_ids is None or project_id in self.project_ids

    def where(self, column: InstrumentedAttribute[int]) -> ColumnElement[bool]:
        """The SQL condition for a query over rows with this project column."""
        if self.project_ids is None:
            return true()
        return column.in_(sorted(self.project_ids))


def scope_of(principal: Principal, memberships: Iterable[int]) -> ReadScope:
    """Administrators read every project; anyone else the projects they belong to."""
    return ReadScope(None if principal.is_admin else frozenset(memberships))


def read_scope(s: Session, principal: Principal) -> ReadScope:
    if principal.is_admin:
        return scope_of(principal, ())
    ids = s.scalars(select(ProjectMember.project_id)
                    .where(ProjectMember.user_id == principal.user_id)).all()
    return scope_of(principal, ids)


def readable_run(s: Session, scope: ReadScope, run_id: str) -> Run:
    """The run, or NotFound whether it does not exist or is another project's."""
    run = s.get(Run, run_id)
    if run is None or not scope.allows(run.project_id):
        raise NotFound(f"no run {run_id!r} in your projects")
    return run


def readable_campaign(s: Session, scope: ReadScope, campaign_id: str) -> Campaign:
    """The campaign, or NotFound whether it does not exist, was deleted or is another
    project's."""
    campaign = s.get(Campaign, campaign_id)
    if (campaign is None or campaign.deleted_at is not None
            or not scope.allows(campaign.project_id)):
        raise NotFound(f"no campaign {campaign_id!r} in your projects")
    return campaign


@dataclass(frozen=True)
class Readable:
    """The runs and campaigns a caller may see, by id, for data kept outside the state
    database: the time-series store's points carry run and campaign ids, not the
    project. None: all of them (administrators)."""

    runs: frozenset[str] | None = None
    campaigns: frozenset[str] | None = None

    def run(self, run_id: str) -> bool:
        return self.runs is None or run_id in self.runs

    def campaign(self, campaign_id: str) -> bool:
        return self.campaigns is None or campaign_id in self.campaigns


def readable(ctx: Context, principal: Principal) -> Readable:
    with ctx.db.session() as s:
        scope = read_scope(s, principal)
        if scope.everything:
            return Readable()
        runs = s.scalars(select(Run.id).where(scope.where(Run.project_id))).all()
        campaigns = s.scalars(select(Campaign.id)
                              .where(scope.where(Campaign.project_id))).all()
        return Readable(runs=frozenset(runs), campaigns=frozenset(campaigns))


def may_manage_user(principal: Principal, user_name: str) -> bool:
    """Whose tokens a caller may list and revoke: an administrator anyone's, a user
    their own."""
    return principal.is_admin or principal.name == user_name
