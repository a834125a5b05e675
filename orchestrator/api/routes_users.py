"""Users, tokens and projects."""

from __future__ import annotations

from orchestrator.api.deps import CtxDep, UserDep
from orchestrator.api.errors import responses
from orchestrator.api.finite import api_router
from orchestrator.schemas import ProjectCreate, ProjectPublic, UserCreate, UserToken
from orchestrator.services import users

router = api_router("/api/v1", "users")


@router.post("/users", status_code=201, responses=responses(403, 409))
def create_user(ctx: CtxDep, me: UserDep, body: UserCreate) -> UserToken:
    return users.create_user(ctx, me, body)


@router.get("/me")
def whoami(me: UserDep) -> dict[str, object]:
    return {"name": me.name, "is_admin": me.is_admin}


@router.post("/projects", status_code=201, responses=responses(403, 409))
def create_project(ctx: CtxDep, me: UserDep, body: ProjectCreate) -> ProjectPublic:
    return users.create_project(ctx, me, body)
