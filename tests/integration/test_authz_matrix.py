"""The authorization matrix: every route of the app, called by an administrator, a
member of project p1, a member of project p2, a node and nobody, answers what
docs/security.md ("Authorization") says. The routes are read from the app itself, so a
new route without a row in :data:`MATRIX` fails the test.

Real parts: the app on a real SQLite file, the real catalogue, bundles uploaded through
the agent API, and a real influxd for the pages' time series (without one those pages
answer 503 to whoever passed the sign-in check, still apart from the redirect).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient

from orchestrator.api.app import create_app
from orchestrator.services.context import Context
from orchestrator.services.ingest import ingest_pending
from testbed_common import wire
from testbed_common.bundle import build_bundle
from tests.conftest import ManualClock, unavailable
from tests.integration import influxd
from tests.integration.conftest import Api, make_settings
from tests.recorded import tat_result

SUBJECTS = ("admin", "m1", "m2", "node", "anon")
#: Any 2xx: the call got past authorization and did its work.
OK = "2xx"
#: 303 to the sign-in form (the pages' answer to a caller who is not signed in).
LOGIN = "login"
Expect = str | int


def routes(app: FastAPI) -> set[tuple[str, str]]:
    """(method, path) of every route the app serves (HEAD goes with GET)."""
    out = set()
    for route in iter_route_contexts(app.routes):
        for method in route.methods or ():
            if method != "HEAD" and route.path is not None:
                out.add((method, route.path))
    return out


# --- the world the calls act on ----------------------------------------------------
@dataclass
class World:
    api: Api
    tmp: Path
    tokens: dict[str, str] = field(default_factory=dict)  # user name -> an API token
    node_token: str = ""
    run_p1: str = ""  # a done run of p1 on se-01, bundle archived
    run_p2: str = ""  # a done run of p2 on se-01, bundle archived
    campaign_p1: str = ""
    release_p1: str = ""

    @property
    def client(self) -> TestClient:
        return self.api.client

    def user_token(self, name: str) -> str:
        """A fresh token for ``name`` (a cell's revocation must not spoil the next)."""
        r = self.client.post(f"/api/v1/users/{name}/tokens", headers=self.api.admin, json={})
        assert r.status_code == 201, r.text
        token: str = r.json()["token"]
        return token

    def headers(self, subject: str) -> dict[str, str]:
        if subject == "admin":
            return dict(self.api.admin)
        if subject == "node":
            return Api.node(self.node_token)
        if subject in ("m1", "m2"):
            return Api.node(self.user_token(subject))  # a bearer header, as a node's
        return {}

    def book(self, project: str, node: str, *, as_user: str = "admin") -> str:
        headers = self.api.admin if as_user == "admin" else Api.node(self.user_token(as_user))
        r = self.client.post("/api/v1/runs", headers=headers, json={
            "experiment": "tat", "node": node, "interface": "op0", "project": project,
            "parameters": {"duration_s": 5}})
        assert r.status_code == 201, r.text
        run_id: str = r.json()["id"]
        return run_id

    def advance(self, run_id: str, *states: str) -> None:
        """Hands se-01's due runs to it, then reports ``states`` for ``run_id``."""
        self.api.heartbeat(self.node_token)
        for state in states:
            r = self.api.report(self.node_token, run_id, state)
            assert r.status_code == 204, r.text

    def bundle(self, run_id: str) -> bytes:
        root = self.tmp / run_id
        (root / "results").mkdir(parents=True)
        (root / "results" / "tat.json").write_text(json.dumps(
            {**tat_result(server="172.30.1.10"), "start": self.api.clock.now().isoformat()}))
        return build_bundle(root, run_id=run_id, node_id="se-01")

    def start_upload(self, run_id: str) -> bytes:
        data = self.bundle(run_id)
        r = self.client.post(f"{wire.AGENT_PREFIX}/runs/{run_id}/bundle",
                             headers=Api.node(self.node_token),
                             json={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        assert r.status_code == 200, r.text
        return data

    def upload(self, run_id: str) -> None:
        data = self.start_upload(run_id)
        r = self.client.patch(f"{wire.AGENT_PREFIX}/runs/{run_id}/bundle", content=data,
                              headers={**Api.node(self.node_token),
                                       wire.UPLOAD_OFFSET_HEADER: "0"})
        assert r.json()["complete"], r.text

    def idle(self) -> None:
        """No release job running: each cell's call may start one."""
        for _ in range(600):
            listed = self.client.get("/api/v1/datasets", headers=self.api.admin).json()
            if all(r["job"] is None for r in listed):
                return
            time.sleep(0.2)
        raise AssertionError(f"release jobs still running: {listed}")

    def release(self) -> str:
        """A ready dataset release of p1's campaign, built through the API."""
        self.idle()
        r = self.client.post("/api/v1/datasets", headers=self.api.admin,
                             json={"campaigns": [self.campaign_p1]})
        assert r.status_code == 202, r.text
        self.idle()
        release_id: str = r.json()["id"]
        return release_id

    def finished(self, run_id: str) -> str:
        self.advance(run_id, "running", "uploading")
        self.upload(run_id)
        return run_id


def build_world(api: Api, tmp: Path) -> World:
    w = World(api, tmp)
    admin = api.admin
    for project in ("p1", "p2"):
        assert api.client.post("/api/v1/projects", headers=admin,
                               json={"name": project}).status_code == 201
    for name, project in (("m1", "p1"), ("m2", "p2")):
        r = api.client.post("/api/v1/users", headers=admin,
                            json={"name": name, "projects": [project]})
        assert r.status_code == 201, r.text
    w.node_token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    api.add_node("se-02", [("op0", "240-07", "Tele2")])
    r = api.client.post("/api/v1/campaigns", headers=Api.node(w.user_token("m1")), json={
        "version": 2, "name": "p1-campaign", "project": "p1", "nodes": ["se-01"],
        "steps": [{"experiment": "tat", "parameters": {"duration_s": 5}}]})
    assert r.status_code == 201, r.text
    w.campaign_p1 = r.json()["id"]
    [run] = r.json()["runs"]
    w.run_p1 = w.finished(run["id"])
    w.run_p2 = w.finished(w.book("p2", "se-01", as_user="m2"))
    w.release_p1 = w.release()
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    if ctx.timeseries is not None:
        ctx.timeseries.create_database()  # type: ignore[attr-defined]
        assert ingest_pending(ctx, ctx.timeseries).written_runs == 2
    return w


# --- the calls ---------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    path: str
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)


Prepare = Callable[[World, str], Call]


def fixed(path: str, body: Any = None) -> Prepare:
    return lambda _w, _subject: Call(path, json=body)


def p1_run_on_se02(w: World, _subject: str) -> Call:
    return Call(f"/api/v1/runs/{w.book('p1', 'se-02')}/cancel", json={})


def node_run(*states: str) -> Prepare:
    """A fresh run of se-01 taken to ``states`` (for the node's calls; for anyone else
    the p1 run will do: they are refused before it matters)."""
    def prepare(w: World, subject: str) -> Call:
        if subject != "node":
            return Call(w.run_p1)
        run_id = w.book("p1", "se-01")
        w.advance(run_id, *states)
        return Call(run_id)
    return prepare


def agent_state(w: World, subject: str) -> Call:
    run_id = node_run()(w, subject).path
    return Call(f"{wire.AGENT_PREFIX}/runs/{run_id}/state",
                json={"state": "deploying", "reason": "matrix",
                      "at": w.api.clock.now().isoformat()})


def agent_bundle_create(w: World, subject: str) -> Call:
    run_id = node_run("running", "uploading")(w, subject).path
    data = w.bundle(run_id) if subject == "node" else b"x"
    return Call(f"{wire.AGENT_PREFIX}/runs/{run_id}/bundle",
                json={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()})


def agent_bundle_status(w: World, subject: str) -> Call:
    run_id = node_run("running", "uploading")(w, subject).path
    if subject == "node":
        w.start_upload(run_id)
    return Call(f"{wire.AGENT_PREFIX}/runs/{run_id}/bundle")


def agent_bundle_chunk(w: World, subject: str) -> Call:
    run_id = node_run("running", "uploading")(w, subject).path
    data = w.start_upload(run_id) if subject == "node" else b"x"
    return Call(f"{wire.AGENT_PREFIX}/runs/{run_id}/bundle", content=data,
                headers={wire.UPLOAD_OFFSET_HEADER: "0"})


def exclusion(w: World, _subject: str) -> Call:
    """A recorded exclusion, made for this cell (the admin's call drops it)."""
    r = w.client.post("/api/v1/dataset-exclusions", headers=w.api.admin,
                      json={"kind": "node", "target": "se-02", "reason": "matrix"})
    assert r.status_code == 201, r.text
    return Call(f"/api/v1/dataset-exclusions/{r.json()['id']}")


def registration(_w: World, _subject: str) -> Call:
    reg = wire.Registration(agent_version="test", interfaces=[wire.InterfaceReport(
        name="op0", operator=wire.Operator(mcc_mnc="240-01", name="Telia"))])
    return Call(f"{wire.AGENT_PREFIX}/register", json=reg.model_dump(mode="json"))


def heartbeat(w: World, _subject: str) -> Call:
    hb = wire.Heartbeat(sent_at=w.api.clock.now(), interfaces=[], disk_free_bytes=10**9)
    return Call(f"{wire.AGENT_PREFIX}/heartbeat", json=hb.model_dump(mode="json"))


def fresh_m1_token(w: World, _subject: str) -> Call:
    """One of m1's tokens, made for this cell (an earlier cell may revoke the rest)."""
    r = w.client.post("/api/v1/users/m1/tokens", headers=w.api.admin, json={})
    assert r.status_code == 201, r.text
    return Call(f"/api/v1/users/m1/tokens/{r.json()['token_id']}")


def sign_in(w: World, subject: str) -> Call:
    credential = (w.user_token(subject) if subject in ("m1", "m2") else
                  {"admin": w.api.admin["Authorization"][7:], "node": w.node_token,
                   "anon": ""}[subject])
    return Call("/pages/login", content=f"token={credential}&next=/pages/fleet".encode(),
                headers={"content-type": "application/x-www-form-urlencoded"})


def fresh_p1_campaign(suffix: str = "") -> Prepare:
    """A campaign of m1's in p1, made for this cell (cancel and delete change it)."""
    def prepare(w: World, _subject: str) -> Call:
        r = w.client.post("/api/v1/campaigns", headers=w.headers("m1"), json=CAMPAIGN)
        assert r.status_code == 201, r.text
        return Call(f"{'/pages' if suffix else '/api/v1'}/campaigns/{r.json()['id']}{suffix}")
    return prepare


CAMPAIGN = {"version": 2, "name": "matrix", "project": "p1", "nodes": ["se-02"],
            "steps": [{"experiment": "tat", "parameters": {"duration_s": 5}}]}
RUN = {"experiment": "tat", "node": "se-02", "interface": "op0", "project": "p1",
       "parameters": {"duration_s": 5}}

# Columns: admin, member of p1, member of p2, node se-01, no token. The p1 objects are
# readable by their members and admins; a p2 member is told they do not exist (404).
PUBLIC = (OK, OK, OK, OK, OK)
ANY_USER = (OK, OK, OK, 401, 401)
ADMIN_ONLY = (OK, 403, 403, 401, 401)
P1_ONLY = (OK, OK, 404, 401, 401)
NODE_ONLY = (401, 401, 401, OK, 401)
PAGE = (OK, OK, OK, LOGIN, LOGIN)

MATRIX: dict[tuple[str, str], tuple[tuple[Expect, ...], Prepare]] = {
    ("GET", "/openapi.json"): (PUBLIC, fixed("/openapi.json")),
    ("GET", "/docs"): (PUBLIC, fixed("/docs")),
    ("GET", "/docs/oauth2-redirect"): (PUBLIC, fixed("/docs/oauth2-redirect")),
    ("GET", "/redoc"): (PUBLIC, fixed("/redoc")),
    ("GET", "/healthz"): (PUBLIC, fixed("/healthz")),
    # fleet aggregates without a token; in full for the admin (or the scrape token);
    # any other token is refused rather than shown less
    ("GET", "/metrics"): ((OK, 401, 401, 401, OK), fixed("/metrics")),
    # users, projects, tokens
    ("POST", "/api/v1/users"): (ADMIN_ONLY, lambda _w, s: Call(
        "/api/v1/users", json={"name": f"new-{s}", "projects": ["p1"]})),
    ("GET", "/api/v1/me"): (ANY_USER, fixed("/api/v1/me")),
    ("POST", "/api/v1/projects"): (ADMIN_ONLY, lambda _w, s: Call(
        "/api/v1/projects", json={"name": f"project-{s}"})),
    ("GET", "/api/v1/users/{name}/tokens"): (P1_ONLY, fixed("/api/v1/users/m1/tokens")),
    ("POST", "/api/v1/users/{name}/tokens"): (ADMIN_ONLY,
                                              fixed("/api/v1/users/m1/tokens", {})),
    ("DELETE", "/api/v1/users/{name}/tokens"): (P1_ONLY, fixed("/api/v1/users/m1/tokens")),
    ("DELETE", "/api/v1/users/{name}/tokens/{token_id}"): (P1_ONLY, fresh_m1_token),
    # the fleet: shared, read by every user, changed by admins
    ("POST", "/api/v1/nodes"): (ADMIN_ONLY, lambda _w, s: Call(
        "/api/v1/nodes", json={"id": f"new-{s}", "country": "SE"})),
    ("GET", "/api/v1/nodes"): (ANY_USER, fixed("/api/v1/nodes")),
    ("GET", "/api/v1/nodes/{node_id}"): (ANY_USER, fixed("/api/v1/nodes/se-02")),
    ("PUT", "/api/v1/nodes/{node_id}/maintenance"): (ADMIN_ONLY, fixed(
        "/api/v1/nodes/se-02/maintenance", {"maintenance": False})),
    ("POST", "/api/v1/nodes/{node_id}/rotate-token"): (ADMIN_ONLY,
                                                       fixed("/api/v1/nodes/se-02/rotate-token")),
    ("PUT", "/api/v1/nodes/{node_id}/interfaces/{interface}/quota"): (ADMIN_ONLY, fixed(
        "/api/v1/nodes/se-02/interfaces/op0/quota",
        {"cap_bytes": 10**10, "reset_day": 1, "margin": 0.05})),
    ("GET", "/api/v1/nodes/{node_id}/interfaces/{interface}/quota"): (
        ANY_USER, fixed("/api/v1/nodes/se-02/interfaces/op0/quota")),
    ("GET", "/api/v1/quotas"): (ANY_USER, fixed("/api/v1/quotas")),
    ("PUT", "/api/v1/projects/{project}/budget"): (ADMIN_ONLY, fixed(
        "/api/v1/projects/p1/budget", {"budget_bytes": None})),
    ("POST", "/api/v1/plan"): (ADMIN_ONLY, fixed("/api/v1/plan")),
    ("GET", "/api/v1/experiments"): (ANY_USER, fixed("/api/v1/experiments")),
    ("GET", "/api/v1/experiments/{name}"): (ANY_USER, fixed("/api/v1/experiments/tat")),
    # runs and campaigns: per project
    ("POST", "/api/v1/runs"): (P1_ONLY, fixed("/api/v1/runs", RUN)),
    ("GET", "/api/v1/runs"): (ANY_USER, fixed("/api/v1/runs")),
    ("GET", "/api/v1/runs/{run_id}"): (P1_ONLY, lambda w, _s: Call(
        f"/api/v1/runs/{w.run_p1}")),
    ("POST", "/api/v1/runs/{run_id}/cancel"): (P1_ONLY, p1_run_on_se02),
    ("GET", "/api/v1/runs/{run_id}/bundle"): (P1_ONLY, lambda w, _s: Call(
        f"/api/v1/runs/{w.run_p1}/bundle")),
    ("GET", "/api/v1/runs/{run_id}/result"): (P1_ONLY, lambda w, _s: Call(
        f"/api/v1/runs/{w.run_p1}/result")),
    ("POST", "/api/v1/campaigns"): (P1_ONLY, fixed("/api/v1/campaigns", CAMPAIGN)),
    ("GET", "/api/v1/campaigns"): (ANY_USER, fixed("/api/v1/campaigns")),
    ("GET", "/api/v1/campaigns/{campaign_id}"): (P1_ONLY, lambda w, _s: Call(
        f"/api/v1/campaigns/{w.campaign_p1}")),
    ("POST", "/api/v1/campaigns/{campaign_id}/cancel"): (P1_ONLY, lambda w, _s: Call(
        f"/api/v1/campaigns/{w.campaign_p1}/cancel")),
    ("DELETE", "/api/v1/campaigns/{campaign_id}"): (P1_ONLY, fresh_p1_campaign()),
    # dataset releases: read by whoever reads their campaigns, built by admins
    ("GET", "/api/v1/datasets"): (ANY_USER, fixed("/api/v1/datasets")),
    ("POST", "/api/v1/datasets"): (ADMIN_ONLY, lambda w, _s: w.idle() or Call(
        "/api/v1/datasets", json={"campaigns": [w.campaign_p1]})),
    ("GET", "/api/v1/datasets/{release_id}"): (P1_ONLY, lambda w, _s: Call(
        f"/api/v1/datasets/{w.release_p1}")),
    ("GET", "/api/v1/datasets/{release_id}/datapackage.json"): (P1_ONLY, lambda w, _s: Call(
        f"/api/v1/datasets/{w.release_p1}/datapackage.json")),
    ("GET", "/api/v1/datasets/{release_id}/files"): (P1_ONLY, lambda w, _s: Call(
        f"/api/v1/datasets/{w.release_p1}/files")),
    ("GET", "/api/v1/datasets/{release_id}/files/{path:path}"): (P1_ONLY, lambda w, _s: Call(
        f"/api/v1/datasets/{w.release_p1}/files/tables/runs.csv")),
    ("POST", "/api/v1/datasets/{release_id}/verify"): (ADMIN_ONLY, lambda w, _s: w.idle()
                                                       or Call(f"/api/v1/datasets/"
                                                               f"{w.release_p1}/verify")),
    ("DELETE", "/api/v1/datasets/{release_id}"): (ADMIN_ONLY, lambda w, s: Call(
        f"/api/v1/datasets/{w.release() if s == 'admin' else w.release_p1}")),
    # what every release leaves out: administrators record, list and drop it
    ("GET", "/api/v1/dataset-exclusions"): (ADMIN_ONLY, fixed("/api/v1/dataset-exclusions")),
    ("POST", "/api/v1/dataset-exclusions"): (ADMIN_ONLY, fixed(
        "/api/v1/dataset-exclusions",
        {"kind": "sim", "target": "se-02/op0", "reason": "lent to another project"})),
    ("DELETE", "/api/v1/dataset-exclusions/{exclusion_id}"): (ADMIN_ONLY, exclusion),
    # the agent API: node tokens only, each node its own runs
    ("POST", "/api/v1/agent/register"): (NODE_ONLY, registration),
    ("POST", "/api/v1/agent/heartbeat"): (NODE_ONLY, heartbeat),
    ("POST", "/api/v1/agent/runs/{run_id}/state"): (NODE_ONLY, agent_state),
    ("POST", "/api/v1/agent/runs/{run_id}/bundle"): (NODE_ONLY, agent_bundle_create),
    ("GET", "/api/v1/agent/runs/{run_id}/bundle"): (NODE_ONLY, agent_bundle_status),
    ("PATCH", "/api/v1/agent/runs/{run_id}/bundle"): (NODE_ONLY, agent_bundle_chunk),
    # the pages: signed-in users, each seeing their projects (test below)
    ("GET", "/"): (PAGE, fixed("/")),
    ("GET", "/pages"): (PAGE, fixed("/pages")),
    ("GET", "/pages/"): (PAGE, fixed("/pages/")),
    ("GET", "/pages/hourly"): (PAGE, fixed("/pages/hourly")),
    ("GET", "/pages/daily"): (PAGE, fixed("/pages/daily")),
    ("GET", "/pages/abw-tat"): (PAGE, fixed("/pages/abw-tat")),
    ("GET", "/pages/time-of-day"): (PAGE, fixed("/pages/time-of-day")),
    ("GET", "/pages/goodput"): (PAGE, fixed("/pages/goodput")),
    ("GET", "/pages/short-flows"): (PAGE, fixed("/pages/short-flows")),
    ("GET", "/pages/cca-compare"): (PAGE, fixed("/pages/cca-compare")),
    ("GET", "/pages/abw-tools"): (PAGE, fixed("/pages/abw-tools")),
    ("GET", "/pages/abw-proxy"): (PAGE, fixed("/pages/abw-proxy")),
    ("GET", "/pages/campaigns"): (PAGE, fixed("/pages/campaigns")),
    ("GET", "/pages/fleet"): (PAGE, fixed("/pages/fleet")),
    ("POST", "/pages/campaigns/{campaign_id}/cancel"): ((303, 303, 404, LOGIN, LOGIN),
                                                         fresh_p1_campaign("/cancel")),
    ("POST", "/pages/campaigns/{campaign_id}/delete"): ((303, 303, 404, LOGIN, LOGIN),
                                                         fresh_p1_campaign("/delete")),
    ("GET", "/pages/login"): (PUBLIC, fixed("/pages/login")),
    ("POST", "/pages/login"): ((303, 303, 303, 401, 401), sign_in),
    ("POST", "/pages/logout"): ((303,) * 5, fixed("/pages/logout")),
}

TIME_SERIES_PAGES = {"/pages/hourly", "/pages/daily", "/pages/abw-tat", "/pages/time-of-day"}
#: Pages that read the store but show no TAT (the "No TAT measurements" check skips them).
OTHER_STORE_PAGES = {"/pages/goodput", "/pages/short-flows", "/pages/cca-compare",
                     "/pages/abw-tools", "/pages/abw-proxy"}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))  # the pages' window
    settings = make_settings(tmp_path)
    with contextlib.ExitStack() as stack:
        if influxd.available() is None:  # a real store when the machine has one
            store = stack.enter_context(influxd.running())
            settings = settings.model_copy(update={
                "influx": store.settings("authz", settings.influx)})
        app = create_app(settings, clock=clock, reaper=False)
        with TestClient(app) as client:
            yield build_world(Api(client, clock, settings), tmp_path)
        app.state.ctx.db.engine.dispose()


def test_every_route_has_a_row(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path), reaper=False)
    served = routes(app)
    assert served - MATRIX.keys() == set(), "routes without a row in MATRIX"
    assert MATRIX.keys() - served == set(), "rows of MATRIX for routes that are gone"
    assert all(len(expect) == len(SUBJECTS) for expect, _ in MATRIX.values())


def _meets(expect: Expect, status: int, location: str) -> bool:
    if expect == OK:
        return 200 <= status < 300
    if expect == LOGIN:
        return status == 303 and location.startswith("/pages/login")
    return status == expect


def test_authorization_matrix(world: World) -> None:
    has_store = world.api.settings.influx.url is not None
    failures = []
    for (method, template), (expects, prepare) in sorted(MATRIX.items()):
        for subject, expect in zip(SUBJECTS, expects, strict=True):
            call = prepare(world, subject)
            if (template in TIME_SERIES_PAGES | OTHER_STORE_PAGES and expect == OK
                    and not has_store):
                expect = 503  # past the sign-in check; no store to read from
            headers = {**world.headers(subject), **call.headers}
            world.client.cookies.clear()  # each cell speaks only with its own credential
            r = world.client.request(method, call.path, json=call.json, content=call.content,
                                     headers=headers, follow_redirects=False)
            if not _meets(expect, r.status_code, r.headers.get("location", "")):
                failures.append(f"{method} {call.path} as {subject}: expected {expect}, "
                                f"got {r.status_code} {r.text[:200]}")
    assert not failures, "\n".join(failures)


def _ids(w: World, path: str, subject: str) -> set[str]:
    r = w.client.get(path, headers=w.headers(subject))
    assert r.status_code == 200, r.text
    return {item["id"] for item in r.json()}


def test_a_member_reads_only_their_projects(world: World) -> None:
    """What the matrix's status codes do not show: lists, quotas and pages hold only
    the caller's projects, and another project's run reads as one that never was."""
    w = world
    p1, p2 = {w.run_p1}, {w.run_p2}
    assert p1 <= _ids(w, "/api/v1/runs", "m1") and not p2 & _ids(w, "/api/v1/runs", "m1")
    assert p2 <= _ids(w, "/api/v1/runs", "m2") and not p1 & _ids(w, "/api/v1/runs", "m2")
    assert p1 | p2 <= _ids(w, "/api/v1/runs", "admin")
    assert _ids(w, f"/api/v1/runs?campaign={w.campaign_p1}", "m2") == set()
    assert w.campaign_p1 in _ids(w, "/api/v1/campaigns", "m1")
    assert w.campaign_p1 not in _ids(w, "/api/v1/campaigns", "m2")
    # forbidden and unknown are one answer: nothing tells that the run exists
    theirs = w.client.get(f"/api/v1/runs/{w.run_p1}/result", headers=w.headers("m2"))
    ghost = w.client.get("/api/v1/runs/r-none/result", headers=w.headers("m2"))
    assert (theirs.status_code, ghost.status_code) == (404, 404)
    assert theirs.json()["detail"].replace(w.run_p1, "ID") == \
        ghost.json()["detail"].replace("r-none", "ID")
    # the fleet's SIMs are everyone's to see; a project's budget only its members'
    quotas = w.client.get("/api/v1/quotas", headers=w.headers("m1")).json()
    assert [p["project"] for p in quotas["projects"]] == ["p1"]
    assert {q["node"] for q in quotas["sims"]} == {"se-01", "se-02"}
    admin = w.client.get("/api/v1/quotas", headers=w.headers("admin")).json()
    assert {"p1", "p2"} <= {p["project"] for p in admin["projects"]}
    # the pages: a p2 member sees neither the p1 campaign nor its measurements
    page = w.client.get("/pages/campaigns", headers=w.headers("m2")).text
    assert w.campaign_p1 not in page and "No campaigns yet" in page
    assert w.campaign_p1 in w.client.get("/pages/campaigns", headers=w.headers("m1")).text
    if w.api.settings.influx.url is None:
        unavailable("no influxd here: the time-series pages were not checked")
    for path in sorted(TIME_SERIES_PAGES):
        url = f"{path}?campaign={w.campaign_p1}"
        mine = w.client.get(url, headers=w.headers("m1")).text
        theirs_page = w.client.get(url, headers=w.headers("m2")).text
        assert "No TAT measurements" not in mine, path
        assert "No TAT measurements for campaign" in theirs_page, path
        # the campaign filter offers the campaign to its project's members only
        offered = f'<option value="{w.campaign_p1}">'
        assert offered in w.client.get(f"{path}?days=1", headers=w.headers("m1")).text
        assert offered not in w.client.get(f"{path}?days=1", headers=w.headers("m2")).text


def test_a_node_reaches_only_its_own_runs(world: World) -> None:
    """The agent API gives a node its own runs only: another node's run is not found,
    whichever call names it, and never among its assignments."""
    w = world
    other = w.api.add_node("se-03", [("op0", "240-01", "Telia")])
    queued = w.book("p1", "se-01")  # due on se-01, not on se-03
    assert queued not in [a.run_id for a in w.api.heartbeat(other).assignments]
    base = f"{wire.AGENT_PREFIX}/runs/{queued}"
    calls = [
        ("POST", f"{base}/state", {"state": "running", "reason": "x",
                                   "at": w.api.clock.now().isoformat()}),
        ("POST", f"{base}/bundle", {"size": 1, "sha256": "0" * 64}),
        ("GET", f"{base}/bundle", None),
    ]
    for method, path, body in calls:
        r = w.client.request(method, path, json=body, headers=Api.node(other))
        assert r.status_code == 404, (method, path, r.text)
    r = w.client.patch(f"{base}/bundle", content=b"x",
                       headers={**Api.node(other), wire.UPLOAD_OFFSET_HEADER: "0"})
    assert r.status_code == 404, r.text
    assert w.client.get(f"/api/v1/runs/{queued}", headers=w.api.admin).json()["state"] \
        == "scheduled"
