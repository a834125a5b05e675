"""Users, their API tokens, and projects (who may book what)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.errors import Conflict, NotFound
from orchestrator.schemas import ProjectCreate, ProjectPublic, UserCreate, UserToken
from orchestrator.services.auth import Principal
from orchestrator.services.context import Context
from orchestrator.services.tokens import add_token
from orchestrator.store.locks import creation_lock_name, lock_in_transaction
from orchestrator.store.tables import Project, ProjectMember, User

DEFAULT_PROJECT = "default"


def get_or_create_project(s: Session, name: str, now: datetime) -> Project:
    """The project ``name``, made if missing; concurrent callers (replicas starting
    together, two requests) make it once."""
    lock_in_transaction(s, creation_lock_name("project", name))
    project = s.scalar(select(Project).where(Project.name == name))
    if project is None:
        project = Project(name=name, created_at=now)
        s.add(project)
        s.flush()
    return project


def project_for(s: Session, principal: Principal, name: str) -> Project:
    """The project ``name`` if ``principal`` may use it (admins may use any)."""
    project = s.scalar(select(Project).where(Project.name == name))
    if project is None:
        raise NotFound(f"no project {name!r}; create it first (testbed project add {name})")
    if not principal.is_admin:
        member = s.get(ProjectMember, (project.id, principal.user_id))
        if member is None:
            raise NotFound(f"no project {name!r} among yours")
    return project


def create_project(ctx: Context, principal: Principal, body: ProjectCreate) -> ProjectPublic:
    principal.require_admin()
    with ctx.db.session() as s:
        if s.scalar(select(Project).where(Project.name == body.name)) is not None:
            raise Conflict(f"project {body.name!r} already exists")
        get_or_create_project(s, body.name, ctx.clock.now())
    return ProjectPublic(name=body.name, members=[])


def create_user(ctx: Context, principal: Principal, body: UserCreate) -> UserToken:
    principal.require_admin()
    now = ctx.clock.now()
    with ctx.db.session() as s:
        if s.scalar(select(User).where(User.name == body.name)) is not None:
            raise Conflict(f"user {body.name!r} already exists; use a new name")
        user = User(name=body.name, is_admin=body.is_admin, created_at=now)
        s.add(user)
        s.flush()
        for pname in body.projects or [DEFAULT_PROJECT]:
            project = get_or_create_project(s, pname, ctx.clock.now())
            s.add(ProjectMember(project_id=project.id, user_id=user.id))
        return add_token(s, user, days=body.token_days, now=now)
