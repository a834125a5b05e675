"""What the guard enforces is what the API documents: the operations it reads from the
app's routes (without building the OpenAPI document, which cost each replica 0.6 s of
CPU at its start) are the document's, each with the same security schemes."""

from __future__ import annotations

from pathlib import Path

from orchestrator.api.app import create_app, declared_routes
from orchestrator.api.deps import TOKEN_SCHEME
from orchestrator.api.guard import Operation, operations
from tests.integration.conftest import make_settings


def test_guard_reads_the_documented_operations_and_their_schemes(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path), reaper=False)
    documented = {
        Operation(method.upper(), template,
                  frozenset(name for req in op.get("security", []) for name in req))
        for template, ops in app.openapi()["paths"].items()
        for method, op in ops.items()
    }
    read = operations(declared_routes(app))
    assert len(read) == len(set(read)), "an operation read twice"
    assert set(read) == documented
    # Not vacuous: the agent's and the users' routes need the token, /healthz does not.
    token = {(op.method, op.template) for op in read if TOKEN_SCHEME in op.schemes}
    assert ("POST", "/api/v1/agent/heartbeat") in token
    assert ("GET", "/api/v1/runs/{run_id}") in token
    assert ("GET", "/healthz") not in token
    assert ("GET", "/healthz") in {(op.method, op.template) for op in read}
