"""The guard's rules: an operation declaring the token scheme needs a token, and each
path template matches its own paths only. (That the operations read from the routes
are the OpenAPI document's is tests/integration/test_guard_document.py.)"""

from __future__ import annotations

from orchestrator.api.guard import Operation, rules_for

OPS = [
    Operation("GET", "/api/v1/runs/{run_id}", frozenset({"Token"})),
    Operation("PATCH", "/api/v1/agent/runs/{run_id}/bundle", frozenset({"Token"})),
    Operation("GET", "/api/v1/agent/runs/{run_id}/bundle", frozenset({"Token"})),
    Operation("GET", "/metrics", frozenset({"MetricsToken"})),
    Operation("GET", "/healthz", frozenset()),
]


def test_rules_follow_the_operations() -> None:
    rules = rules_for(OPS, scheme="Token", default_max_body_bytes=10,
                      max_body_bytes={("PATCH", "/api/v1/agent/runs/{run_id}/bundle"): 99})

    def rule(method: str, path: str) -> tuple[bool, int] | None:
        found = next((r for r in rules if r.matches(method, path)), None)
        return None if found is None else (found.needs_token, found.max_body_bytes)

    assert rule("GET", "/api/v1/runs/r-1") == (True, 10)
    assert rule("PATCH", "/api/v1/agent/runs/r-1/bundle") == (True, 99)
    assert rule("GET", "/api/v1/agent/runs/r-1/bundle") == (True, 10)
    assert rule("GET", "/metrics") == (False, 10)
    assert rule("GET", "/healthz") == (False, 10)
    assert rule("GET", "/api/v1/runs/r-1/extra") is None
    assert rule("GET", "/api/v1/runs/") is None
    assert rule("POST", "/api/v1/runs/r-1") is None
