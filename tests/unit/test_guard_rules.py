"""The guard's rules come from the OpenAPI document: a route with the token scheme
needs a token, and each path template matches its own paths only."""

from __future__ import annotations

from orchestrator.api.guard import rules_for

DOC = {"paths": {
    "/api/v1/runs/{run_id}": {"get": {"security": [{"Token": []}]}},
    "/api/v1/agent/runs/{run_id}/bundle": {"patch": {"security": [{"Token": []}]},
                                           "get": {"security": [{"Token": []}]}},
    "/metrics": {"get": {"security": [{"MetricsToken": []}]}},
    "/healthz": {"get": {}},
}}


def test_rules_follow_the_document() -> None:
    rules = rules_for(DOC, scheme="Token", default_max_body_bytes=10,
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
