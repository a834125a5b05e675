"""Data quotas (SIM caps, project budgets) and the planner."""

from __future__ import annotations

from orchestrator.api.deps import CtxDep, InterfacePath, NodeIdPath, ProjectPath, UserDep
from orchestrator.api.errors import responses
from orchestrator.api.finite import api_router
from orchestrator.schemas import (
    BudgetUpdate,
    PlanPublic,
    ProjectQuotaPublic,
    QuotasPublic,
    QuotaUpdate,
    SimQuotaPublic,
)
from orchestrator.services import planning, quotas

router = api_router("/api/v1", "quotas")


@router.put("/nodes/{node_id}/interfaces/{interface}/quota", responses=responses(403, 404))
def set_quota(ctx: CtxDep, me: UserDep, node_id: NodeIdPath, interface: InterfacePath,
              body: QuotaUpdate) -> SimQuotaPublic:
    """Set the monthly data cap of a node's SIM (admin). Re-plans soon after."""
    return quotas.set_quota(ctx, me, node_id, interface, body)


@router.get("/nodes/{node_id}/interfaces/{interface}/quota", responses=responses(404))
def get_quota(ctx: CtxDep, _me: UserDep, node_id: NodeIdPath,
              interface: InterfacePath) -> SimQuotaPublic:
    return quotas.get_quota(ctx, node_id, interface)


@router.get("/quotas")
def list_quotas(ctx: CtxDep, me: UserDep) -> QuotasPublic:
    """Used, reserved, limit and remaining bytes of every SIM (this period) and of the
    caller's projects (every project's for an administrator)."""
    return quotas.quotas_for(ctx, me)


@router.put("/projects/{project}/budget", responses=responses(403, 404))
def set_budget(ctx: CtxDep, me: UserDep, project: ProjectPath,
               body: BudgetUpdate) -> ProjectQuotaPublic:
    """Set (or, with null, remove) a project's lifetime data budget (admin)."""
    return quotas.set_budget(ctx, me, project, body)


@router.post("/plan", responses=responses(403))
def replan(ctx: CtxDep, me: UserDep) -> PlanPublic:
    """Re-plan every campaign now (admin); the planner also runs on a timer."""
    me.require_admin()
    return planning.replan(ctx)
