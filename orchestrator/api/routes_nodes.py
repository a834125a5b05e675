"""Nodes as operators see them."""

from __future__ import annotations

from orchestrator.api.deps import CtxDep, NodeIdPath, UserDep
from orchestrator.api.errors import responses
from orchestrator.api.finite import api_router
from orchestrator.schemas import MaintenanceUpdate, NodeCreate, NodeCreated, NodePublic
from orchestrator.services import nodes

router = api_router("/api/v1/nodes", "nodes")


@router.post("", status_code=201, responses=responses(403, 409))
def create_node(ctx: CtxDep, me: UserDep, body: NodeCreate) -> NodeCreated:
    return nodes.create_node(ctx, me, body)


@router.get("")
def list_nodes(ctx: CtxDep, _me: UserDep) -> list[NodePublic]:
    return nodes.list_nodes(ctx)


@router.get("/{node_id}", responses=responses(404))
def get_node(ctx: CtxDep, _me: UserDep, node_id: NodeIdPath) -> NodePublic:
    return nodes.get_node(ctx, node_id)


@router.put("/{node_id}/maintenance", responses=responses(403, 404))
def set_maintenance(ctx: CtxDep, me: UserDep, node_id: NodeIdPath,
                    body: MaintenanceUpdate) -> NodePublic:
    return nodes.set_maintenance(ctx, me, node_id, body)
