"""What a node is told depends only on its own runs: every agent-facing route answers
an id of ANOTHER node's existing run exactly as it answers an id that does not exist:
the same status, body and headers, and the same database statements on the way (so no
extra existence check that a clock could tell apart). The routes are read from the app
(every route under the agent prefix, and every run id they take, in the path or in the
body), so a new agent route is compared as it is added."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import event

from orchestrator.api.app import create_app, declared_routes
from testbed_common import wire
from tests.conftest import ManualClock
from tests.integration.conftest import Api, make_settings


@pytest.fixture
def app_api(tmp_path: Path, clock: ManualClock) -> Iterator[Api]:
    settings = make_settings(tmp_path)
    app = create_app(settings, clock=clock, reaper=False)
    with TestClient(app) as client:
        yield Api(client, clock, settings)
    app.state.ctx.db.engine.dispose()


def ghost_of(run_id: str) -> str:
    """An id of the same length and shape that no run has."""
    return run_id[:-8] + "0badf00d" if not run_id.endswith("0badf00d") else run_id[:-8] + "1"


def run_id_fields(schema: dict[str, Any], schemas: dict[str, Any]) -> list[str]:
    """The body's top-level fields that carry run ids (``*run_id``, ``*run_ids``)."""
    if "$ref" in schema:
        schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
    return [name for name in schema.get("properties", {})
            if re.search(r"run_ids?$", name)]


def body_for(method: str, template: str, clock: ManualClock) -> dict[str, Any] | None:
    """A body each agent route accepts."""
    now = clock.now().isoformat()
    bodies: dict[tuple[str, str], dict[str, Any]] = {
        ("POST", "/register"): {"agent_version": "t", "interfaces": []},
        ("POST", "/heartbeat"): {"sent_at": now, "interfaces": [], "disk_free_bytes": 1},
        ("POST", "/runs/{run_id}/state"): {"state": "running", "reason": "x", "at": now},
        ("POST", "/runs/{run_id}/bundle"): {"size": 10, "sha256": "0" * 64},
    }
    return bodies.get((method, template.removeprefix(wire.AGENT_PREFIX)))


class Statements:
    """The SQL statements the app sends, in order (their text, not their values)."""

    def __init__(self, engine: Any) -> None:
        self.seen: list[str] = []
        event.listen(engine, "before_cursor_execute", self._note)

    def _note(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        self.seen.append(re.sub(r"\s+", " ", statement))


def ask(api: Api, statements: Statements, method: str, path: str, *, token: str,
        body: dict[str, Any] | None) -> tuple[int, str, dict[str, str], list[str]]:
    statements.seen.clear()
    headers = {**Api.node(token), wire.UPLOAD_OFFSET_HEADER: "0"}
    if method == "PATCH":
        r = api.client.patch(path, content=b"x" * 10, headers=headers)
    else:
        r = api.client.request(method, path, json=body, headers=headers)
    shown = {k: v for k, v in r.headers.items() if k.lower() != "date"}
    return r.status_code, r.text, shown, list(statements.seen)


def test_another_nodes_run_reads_as_no_run_on_every_agent_route(app_api: Api) -> None:
    api = app_api
    owner = api.add_node("se-01", [("op0", "240-01", "Telia")])
    prober = api.add_node("se-02", [("op0", "240-07", "Tele2")])
    # se-01's runs in the states a prober could meet: booked, running with an upload
    # declared, failed
    booked = api.submit("se-01")["id"]
    running = api.submit("se-01")["id"]
    done = api.submit("se-01")["id"]
    api.heartbeat(owner)
    for run_id, states in ((running, ("deploying", "running")),
                           (done, ("deploying", "running", "failed"))):
        for state in states:
            assert api.report(owner, run_id, state).status_code == 204
    r = api.client.post(f"{wire.AGENT_PREFIX}/runs/{running}/bundle", headers=Api.node(owner),
                        json={"size": 10, "sha256": "0" * 64})
    assert r.status_code == 200, r.text
    app = api.client.app
    doc = api.client.get("/openapi.json").json()
    statements = Statements(app.state.ctx.db.engine)  # type: ignore[attr-defined]
    routes = [(m, route.path_format) for route in declared_routes(app)  # type: ignore[arg-type]
              if isinstance(route, APIRoute) and route.path_format.startswith(wire.AGENT_PREFIX)
              for m in sorted(route.methods or ())]
    assert len(routes) >= 6, routes
    compared = 0
    failures = []
    for method, template in routes:
        op = doc["paths"][template][method.lower()]
        schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}) \
            .get("schema", {})
        fields = run_id_fields(schema, doc["components"]["schemas"])
        if "{run_id}" not in template and not fields:
            continue  # names no run: nothing to compare
        for theirs in (booked, running, done):
            answers = []
            for run_id in (theirs, ghost_of(theirs)):
                path = template.replace("{run_id}", run_id)
                body = body_for(method, template, api.clock)
                if body is not None:
                    for name in fields:
                        body[name] = [run_id] if name.endswith("ids") else run_id
                status, text, headers, sql = ask(api, statements, method, path,
                                                 token=prober, body=body)
                answers.append((status, text.replace(run_id, "ID"), headers, sql))
            compared += 1
            if answers[0] != answers[1]:
                failures.append(f"{method} {template} ({theirs}): another node's run "
                                f"{answers[0][:2]} / {len(answers[0][3])} statements; no run "
                                f"{answers[1][:2]} / {len(answers[1][3])} statements")
    assert compared >= 5 * 3, compared
    assert not failures, "\n".join(failures)
    # every other route that names a run answers a node token alike for both (401:
    # a node token is no user's), whatever the method
    for route in declared_routes(app):  # type: ignore[arg-type]
        if not isinstance(route, APIRoute) or "{run_id}" not in route.path_format \
                or route.path_format.startswith(wire.AGENT_PREFIX):
            continue
        for method in sorted(route.methods or ()):
            answers = []
            for run_id in (running, ghost_of(running)):
                r = api.client.request(method, route.path_format.replace("{run_id}", run_id),
                                       json={}, headers=Api.node(prober))
                answers.append((r.status_code, r.text.replace(run_id, "ID")))
            compared += 1
            if answers[0] != answers[1] or answers[0][0] != 401:
                failures.append(f"{method} {route.path_format}: {answers}")
    assert not failures, "\n".join(failures)
    # and se-01's runs are untouched by what se-02 said
    for run_id, state in ((booked, "assigned"), (running, "running")):
        assert api.client.get(f"/api/v1/runs/{run_id}", headers=api.admin).json()["state"] \
            == state
    # the heartbeat tells the prober to drop both, alike
    reply = api.heartbeat(prober, running=[running, ghost_of(running)])
    assert reply.cancel_run_ids == sorted([running, ghost_of(running)])
    json.dumps(reply.model_dump(mode="json"))
