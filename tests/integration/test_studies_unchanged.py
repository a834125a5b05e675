"""What a user sees of the studies does not change when their code moves (issue 33,
done-means 2): one archive holding a run of each first-party study's result format
(tests/golden/archive, made by tests/golden/make_archive.py) goes through the real
parts (uploads through the agent API on SQLite, ingest into a real influxd, the pages
over HTTP, a release through the CLI), and what comes out is compared with what
today's code gave, recorded in tests/golden/expected:

- ``points.lp``: every point ingest writes, as line protocol, sorted;
- ``pages/*.html``: every page that shows these studies (and the index, whose
  navigation names them), for the campaign;
- ``release.sha256``: the SHA-256 of every file of the release, so byte for byte.

Ids are random in production; here the id generators draw from a fixed sequence, so
that two sessions book the same ids. ``TESTBED_GOLDEN_RECORD=1`` writes the expected
files afresh (only after a change that is meant to change what users see).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.api.app import create_app
from orchestrator.model import ids
from orchestrator.services import bookings
from orchestrator.services.context import Context
from orchestrator.services.ingest import ingest_pending
from orchestrator.timeseries.lineprotocol import Point, encode
from testbed_common import wire
from testbed_common.bundle import build_bundle
from tests.conftest import REPO, ManualClock
from tests.integration import influxd
from tests.integration.conftest import Api, make_settings
from tests.integration.test_dataset import build, files

pytestmark = pytest.mark.requires(influxd.available())

GOLDEN = REPO / "tests/golden"
ARCHIVE = GOLDEN / "archive"
EXPECTED = GOLDEN / "expected"
RECORD = os.environ.get("TESTBED_GOLDEN_RECORD") == "1"
#: One run of each; parameters only where a default would be refused or slow to book.
STEPS: list[dict[str, Any]] = [
    {"experiment": "tat"},
    {"experiment": "abw-tat", "parameters": {"repetitions": 1, "halves": 1}},
    {"experiment": "short-flows"},
    {"experiment": "goodput-sequence"},
    {"experiment": "cca-compare", "parameters": {"repetitions": 1}},
    {"experiment": "abw-tools", "parameters": {"methods": ["yaz"], "repetitions": 1}},
]
#: The pages that show the studies, read for the campaign.
PAGES = ("hourly", "daily", "abw-tat", "time-of-day", "short-flows", "goodput",
         "cca-compare", "abw-tools", "abw-proxy")
KEY = "00112233445566778899aabbccddeeff" * 2 + "\n"


class _Recorder:
    """The store's sink, keeping a copy of every point written through it."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.points: list[Point] = []

    def write(self, points: Sequence[Point]) -> int:
        self.points.extend(points)
        return int(self.sink.write(points))


def _fixed_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ids from a counter instead of the OS's randomness (ids.py, bookings.py)."""
    counter = itertools.count(1)
    fixed = SimpleNamespace(token_hex=lambda n: f"{next(counter):0{2 * n}x}",
                            randbits=lambda k: 12345 % (1 << k),
                            token_urlsafe=ids.secrets.token_urlsafe)
    monkeypatch.setattr(ids, "secrets", fixed)
    monkeypatch.setattr(bookings, "secrets", fixed)


@pytest.fixture
def golden_api(tmp_path: Path, store: influxd.Influxd, monkeypatch: pytest.MonkeyPatch,
               migrated_sqlite: Path) -> Iterator[Api]:
    _fixed_ids(monkeypatch)
    db = tmp_path / "testbed.db"
    shutil.copy(migrated_sqlite, db)
    base = make_settings(tmp_path)
    settings = base.model_copy(update={
        "database_url": f"sqlite:///{db}",
        "influx": store.settings("golden", base.influx)})
    clock = ManualClock()
    app = create_app(settings, clock=clock, reaper=False)
    with TestClient(app) as client:
        yield Api(client, clock, settings)
    app.state.ctx.db.engine.dispose()


def _upload(api: Api, token: str, run: dict[str, Any], tmp: Path) -> None:
    root = tmp / run["id"]
    shutil.copytree(ARCHIVE / run["experiment"], root)
    (root / "meta").mkdir(exist_ok=True)
    (root / "meta" / "run.json").write_text(json.dumps(
        {"format": "testbed.run-meta", "version": 1,
         "image": f"testbed/exp-{run['experiment']}:1", "image_id": "sha256:" + "ab" * 32,
         "agent_version": "0.1.0", "started_at": api.clock.now().isoformat(),
         "bytes_used": 4_000_000, "clock": None}))
    data = build_bundle(root, run_id=run["id"], node_id=run["node"])
    api.heartbeat(token)
    for state in ("running", "uploading"):
        api.report(token, run["id"], state)
    url = f"{wire.AGENT_PREFIX}/runs/{run['id']}/bundle"
    api.client.post(url, headers=api.node(token),
                    json={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    r = api.client.patch(url, content=data, headers={**api.node(token),
                                                     wire.UPLOAD_OFFSET_HEADER: "0"})
    assert r.status_code == 200 and r.json()["complete"], (r.status_code, r.text)


def _outputs(api: Api, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """The points, pages and release checksums of the archive, by expected file name."""
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    assert ctx.timeseries is not None
    ctx.timeseries.create_database()  # type: ignore[attr-defined]
    token = api.add_node("se-01", [("op0", "240-01", "Telia")], timezone="Europe/Stockholm")
    spec = {"version": 2, "name": "golden", "project": "default", "nodes": ["se-01"],
            "steps": STEPS}
    r = api.client.post("/api/v1/campaigns", headers=api.admin, json=spec)
    assert r.status_code == 201, r.text
    campaign = r.json()["id"]
    runs = sorted(r.json()["runs"], key=lambda run: run["not_before"])
    assert sorted(run["experiment"] for run in runs) == sorted(s["experiment"] for s in STEPS)
    for run in runs:
        api.clock.t = max(api.clock.t, datetime.fromisoformat(run["not_before"]))
        _upload(api, token, run, tmp / "bundles")
        api.clock.advance(60)

    recorder = _Recorder(ctx.timeseries)
    assert ingest_pending(ctx, recorder).written_runs == len(STEPS)
    out = {"points.lp": "".join(sorted(encode(p) + "\n" for p in recorder.points)).encode()}
    for page in ("", *PAGES):
        got = api.client.get(f"/pages/{page}", params={"campaign": campaign},
                             headers=api.admin)
        assert got.status_code == 200, (page, got.text)
        out[f"pages/{page or 'index'}.html"] = got.content

    key = tmp / "release.key"
    key.write_text(KEY)
    built = build(api, monkeypatch, "build", campaign, "--key-file", str(key), "--raw",
                  "--version", "2026.11.22", "--out", str(tmp / "release"))
    assert built.exit_code == 0, built.output
    out["release.sha256"] = "".join(
        f"{hashlib.sha256(data).hexdigest()}  {name}\n"
        for name, data in sorted(files(tmp / "release").items())).encode()
    return out


def test_points_pages_and_release_are_those_recorded(
        golden_api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    got = _outputs(golden_api, tmp_path, monkeypatch)
    if RECORD:
        shutil.rmtree(EXPECTED, ignore_errors=True)
        for name, data in got.items():
            (EXPECTED / name).parent.mkdir(parents=True, exist_ok=True)
            (EXPECTED / name).write_bytes(data)
    expected = {p.relative_to(EXPECTED).as_posix(): p.read_bytes()
                for p in sorted(EXPECTED.rglob("*")) if p.is_file()}
    assert sorted(got) == sorted(expected)
    for name in sorted(got):
        assert got[name].decode() == expected[name].decode(), name
