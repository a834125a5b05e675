"""An orchestrator app on a real SQLite file and the real experiment catalogue."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from orchestrator.api.app import create_app
from orchestrator.cli import client as cli_client
from orchestrator.cli import main as cli_main
from orchestrator.cli.client import ApiClient
from orchestrator.settings import DatasetSettings, SchedulingSettings, Settings
from orchestrator.store.migrate import upgrade
from testbed_common import wire
from testbed_common.bundle import build_bundle
from tests.conftest import REPO, ManualClock, require
from tests.integration import influxd, postgres
from tests.recorded import tat_result

ADMIN = "admin-token-for-tests-0123456789"


#: The emulated fleet's SIMs have no configured caps; like the compose stack, tests give
#: every SIM a default one (10 GB a month) so that runs book.
TEST_SIM_CAP = 10**10


def make_settings(tmp: Path, **overrides: Any) -> Settings:
    overrides.setdefault("scheduling", SchedulingSettings(default_sim_cap_bytes=TEST_SIM_CAP))
    overrides.setdefault("datasets", DatasetSettings(dir=tmp / "releases",
                                                     keys_dir=tmp / "release-keys"))
    return Settings(
        environment="development",
        database_url=f"sqlite:///{tmp / 'testbed.db'}",
        archive_dir=tmp / "archive",
        upload_dir=tmp / "uploads",
        experiments_dir=REPO / "experiments",
        admin_token=ADMIN,
        **overrides,
    )


class Api:
    """The app under test plus helpers that speak as admin, as a user, or as a node."""

    def __init__(self, client: httpx.Client, clock: ManualClock, settings: Settings) -> None:
        # a TestClient, or a client of an orchestrator in a process of its own
        self.client = client
        self.clock = clock
        self.settings = settings
        self.admin = {"Authorization": f"Bearer {ADMIN}"}

    def add_node(self, node_id: str, interfaces: list[tuple[str, str, str]],
                 **facts: Any) -> str:
        r = self.client.post("/api/v1/nodes", headers=self.admin,
                             json={"id": node_id, "country": "SE", **facts})
        assert r.status_code == 201, r.text
        token: str = r.json()["token"]
        reg = wire.Registration(
            agent_version="test", interfaces=[
                wire.InterfaceReport(name=n, operator=wire.Operator(mcc_mnc=m, name=o))
                for n, m, o in interfaces
            ],
        )
        r = self.client.post(f"{wire.AGENT_PREFIX}/register", headers=self.node(token),
                             json=reg.model_dump(mode="json"))
        assert r.status_code == 200, r.text
        return token

    @staticmethod
    def node(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def heartbeat(self, token: str, running: list[str] | None = None) -> wire.HeartbeatReply:
        hb = wire.Heartbeat(sent_at=self.clock.now(), interfaces=[], disk_free_bytes=10**9,
                            running_run_ids=running or [])
        r = self.client.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=self.node(token),
                             json=hb.model_dump(mode="json"))
        assert r.status_code == 200, r.text
        return wire.HeartbeatReply.model_validate(r.json())

    def report(self, token: str, run_id: str, state: str, reason: str = "test") -> Any:
        return self.client.post(
            f"{wire.AGENT_PREFIX}/runs/{run_id}/state", headers=self.node(token),
            json={"state": state, "reason": reason, "at": self.clock.now().isoformat()},
        )

    def submit(self, node: str, interface: str = "op0", **params: Any) -> dict[str, Any]:
        r = self.client.post("/api/v1/runs", headers=self.admin, json={
            "experiment": "tat", "node": node, "interface": interface, "parameters": params})
        assert r.status_code == 201, r.text
        out: dict[str, Any] = r.json()
        return out

    def cli(self, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
        """The real ``testbed`` CLI, its HTTP client pointed at the app under test (as
        admin); stdout and stderr apart."""
        def client(url: str, token: str | None) -> ApiClient:
            c = ApiClient(url, token)
            c.http = self.client  # type: ignore[assignment]  # speaks httpx.Client's API
            self.client.headers.update(self.admin)
            return c
        monkeypatch.setattr(cli_client, "ApiClient", client)
        return CliRunner().invoke(cli_main.cli, list(args))


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    why = postgres.available()
    require(why is None, f"PostgreSQL: {why}")
    with postgres.server() as url:
        yield url


#: The database every API test starts from: migrated to head once per session and engine.
MIGRATED = "migrated"


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated from empty to head, once per session."""
    path = tmp_path_factory.mktemp("migrated") / "testbed.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def migrated_postgres(postgres_url: str) -> str:
    """A PostgreSQL database migrated from empty to head, once per session; the name of
    the template each test's database is copied from."""
    upgrade(postgres.create_database(postgres_url, MIGRATED))
    return MIGRATED


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database on each engine, for the tests whose subject is the migrations
    (the others start from :func:`database_url`'s migrated copy)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    url_template: str = request.getfixturevalue("postgres_url")
    return postgres.create_database(url_template, f"m_{uuid.uuid4().hex[:12]}")


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every API test runs on both databases: one schema, only the URL differs. Each
    test gets its own copy of a database migrated once per session (migrating from
    empty took most of a test's setup, hundreds of times over); the app's own upgrade
    at start then finds it at head. The migrations from empty stay tested where they
    are the subject (tests/integration/test_migrations.py, test_replicas_postgres.py)
    and in every app built on a fresh SQLite file (``make_settings``)."""
    if request.param == "sqlite":
        path = tmp_path / "testbed.db"
        shutil.copyfile(request.getfixturevalue("migrated_sqlite"), path)
        return f"sqlite:///{path}"
    url_template: str = request.getfixturevalue("postgres_url")
    return postgres.create_database(url_template, f"t_{uuid.uuid4().hex[:12]}",
                                    template=request.getfixturevalue("migrated_postgres"))


@pytest.fixture
def api(tmp_path: Path, clock: ManualClock, database_url: str) -> Iterator[Api]:
    settings = make_settings(tmp_path).model_copy(update={"database_url": database_url})
    app = create_app(settings, clock=clock, reaper=False)
    with TestClient(app) as client:
        yield Api(client, clock, settings)
    app.state.ctx.db.engine.dispose()


@pytest.fixture
def store() -> Iterator[influxd.Influxd]:
    with influxd.running() as s:
        yield s


@pytest.fixture
def api_influx(tmp_path: Path, clock: ManualClock, store: influxd.Influxd) -> Iterator[Api]:
    base = make_settings(tmp_path)
    settings = base.model_copy(
        update={"influx": store.settings("ingest_test", base.influx)})
    app = create_app(settings, clock=clock, reaper=False)
    with TestClient(app) as client:
        yield Api(client, clock, settings)
    app.state.ctx.db.engine.dispose()
def _tat(start: str) -> dict[str, Any]:
    """A real tat.json, given its own start time (each run its own)."""
    return {**tat_result(server="172.30.1.10"), "start": start}


def upload_tat_run(api: Api, token: str, tmp: Path, *, system: bool = False,
                   capture: bytes | None = None) -> str:
    """Submit a tat run and upload its bundle through the agent API: a real tat.json,
    without modem metadata (and with a system sample or a packet capture if asked)."""
    run = api.submit("se-01", duration_s=5)
    api.heartbeat(token)
    for state in ("running", "uploading"):
        api.report(token, run["id"], state)
    root = tmp / run["id"]
    (root / "results").mkdir(parents=True)
    (root / "results" / "tat.json").write_text(
        json.dumps(_tat(api.clock.now().isoformat())))
    if capture is not None:
        (root / "results" / "capture.pcap").write_bytes(capture)
    if system:
        (root / "meta").mkdir()
        (root / "meta" / "system.jsonl").write_text(json.dumps(
            {"time": api.clock.now().isoformat(), "cpu_pct": 33.0, "mem_pct": 50.0,
             "temperature_c": 48.0, "disk_free_bytes": 123}) + "\n")
    data = build_bundle(root, run_id=run["id"], node_id="se-01")
    url = f"{wire.AGENT_PREFIX}/runs/{run['id']}/bundle"
    api.client.post(url, headers=api.node(token),
                    json={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    r = api.client.patch(url, content=data, headers={**api.node(token),
                                                     wire.UPLOAD_OFFSET_HEADER: "0"})
    assert r.json()["complete"], r.text
    run_id: str = run["id"]
    return run_id
