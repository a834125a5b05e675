"""A study that is not the platform's gets everything a first-party study gets (issue 33,
done-means 3): the echo study (tests/fixtures/echo-study, a package of its own with a
pyproject and one entry point) is installed with pip into a folder of this test's, and
nothing else names it: no change to the core, no registration but its entry point. Its
experiment is one experiment.yaml in the catalogue folder. Then, on real parts (the
app on SQLite, a real influxd, the CLI): its runs' results become its points, its page
is served and in the navigation, and a release holds its table.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from orchestrator.api.app import create_app
from orchestrator.catalogue.plugins import StudyLoadError, installed
from orchestrator.services.context import Context
from orchestrator.services.ingest import ingest_pending
from orchestrator.study import forget
from orchestrator.timeseries.influx import InfluxClient
from testbed_common import wire
from testbed_common.bundle import build_bundle
from tests.conftest import REPO, ManualClock
from tests.integration import influxd
from tests.integration.conftest import Api, make_settings
from tests.integration.test_dataset import build
from tests.pagetables import table_rows

pytestmark = pytest.mark.requires(influxd.available())

PACKAGE = REPO / "tests/fixtures/echo-study"
MANIFEST = """\
name: echo
version: 1
description: Echoes rate samples (an experiment whose study is installed on its own).
image: example/echo:1
result: {file: echo.json, format: example.echo, version: 1}
duration_s: 60
data_volume_bytes: 1e6
"""
SAMPLES = [{"time": "2026-11-22T12:00:01+00:00", "label": "a", "rate_bps": 1.5e6},
           {"time": "2026-11-22T12:00:02+00:00", "label": "b", "rate_bps": 2.5e6}]


def _forget_studies() -> None:
    """Every layer loads the installed studies once per process: forget them."""
    forget()


def _pip_install(source: Path, site: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-index", "--no-build-isolation", "--target", str(site),
                    str(source)], check=True, capture_output=True)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path for packages installed by this test only; the echo study
    installed there."""
    _forget_studies()
    assert "echo" not in {s.entry_point.split(" ")[0] for s in installed()}
    source, site = tmp_path / "echo-study", tmp_path / "site"
    shutil.copytree(PACKAGE, source)
    _pip_install(source, site)
    monkeypatch.syspath_prepend(str(site))
    _forget_studies()
    yield site
    monkeypatch.undo()
    sys.modules.pop("echo_study", None)
    _forget_studies()


@pytest.fixture
def echo_installed(site: Path) -> None:
    pass


@pytest.fixture
def echo_api(tmp_path: Path, store: influxd.Influxd, echo_installed: None) -> Iterator[Api]:
    experiments = tmp_path / "experiments"
    (experiments / "echo").mkdir(parents=True)
    (experiments / "echo" / "experiment.yaml").write_text(MANIFEST)
    base = make_settings(tmp_path)
    settings = base.model_copy(update={
        "experiments_dir": experiments,
        "influx": store.settings("echo", base.influx)})
    app = create_app(settings, clock=ManualClock(), reaper=False)
    with TestClient(app) as client:
        yield Api(client, app.state.ctx.clock, settings)
    app.state.ctx.db.engine.dispose()


def _upload(api: Api, token: str, run: dict[str, object], tmp: Path) -> None:
    root = tmp / str(run["id"])
    (root / "results").mkdir(parents=True)
    (root / "results" / "echo.json").write_text(json.dumps(
        {"format": "example.echo", "version": 1, "samples": SAMPLES}))
    data = build_bundle(root, run_id=str(run["id"]), node_id=str(run["node"]))
    api.heartbeat(token)
    for state in ("running", "uploading"):
        api.report(token, str(run["id"]), state)
    url = f"{wire.AGENT_PREFIX}/runs/{run['id']}/bundle"
    api.client.post(url, headers=api.node(token),
                    json={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    r = api.client.patch(url, content=data, headers={**api.node(token),
                                                     wire.UPLOAD_OFFSET_HEADER: "0"})
    assert r.status_code == 200 and r.json()["complete"], (r.status_code, r.text)


def test_a_study_installed_on_its_own_gets_its_points_page_and_release_table(
        echo_api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    api = echo_api
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    assert isinstance(ctx.timeseries, InfluxClient)
    ctx.timeseries.create_database()
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    r = api.client.post("/api/v1/campaigns", headers=api.admin, json={
        "version": 2, "name": "echo", "nodes": ["se-01"], "steps": [{"experiment": "echo"}]})
    assert r.status_code == 201, r.text
    campaign = r.json()["id"]
    [run] = r.json()["runs"]
    _upload(api, token, run, tmp_path / "bundles")

    # its ingest: the result's samples are its points
    assert ingest_pending(ctx, ctx.timeseries).written_runs == 1
    [series] = ctx.timeseries.query('SELECT "rate_bps", "label" FROM "echo"')
    assert [(row["label"], row["rate_bps"]) for row in series.rows()] == [
        ("a", 1.5e6), ("b", 2.5e6)]

    # its page: served, in the navigation and on the index
    page = api.client.get("/pages/echo", params={"campaign": campaign}, headers=api.admin)
    assert page.status_code == 200, page.text
    assert table_rows(page.text, "echo") == [["se-01", "a", "1500000"],
                                            ["se-01", "b", "2500000"]]
    assert '<a href="/pages/echo" aria-current=page>Echo</a>' in page.text
    index = api.client.get("/", headers=api.admin).text
    assert '<a href="/pages/echo">Echo</a>: The echo study&#x27;s samples.' in index

    # its release table
    out = build(api, monkeypatch, "build", campaign, "--out", str(tmp_path / "release"))
    assert out.exit_code == 0, out.output
    assert build(api, monkeypatch, "verify", str(tmp_path / "release")).exit_code == 0
    table = (tmp_path / "release/tables/echo_samples.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(table)))
    assert [(r["label"], float(r["rate_bps"]), r["node"]) for r in rows] == [
        ("a", 1.5e6, "se-01"), ("b", 2.5e6, "se-01")]
    described = json.loads((tmp_path / "release/datapackage.json").read_text())
    assert "echo-samples" in {res["name"] for res in described["resources"]}

    # its Prometheus series, after the core's, in the public view
    metrics = api.client.get("/metrics")
    assert metrics.status_code == 200, metrics.text
    assert "testbed_nodes{" in metrics.text
    # two samples read by ingest and two again by the release
    assert "\ntestbed_echo_samples_read_total 4.0\n" in metrics.text, metrics.text


def test_a_second_study_claiming_the_same_format_stops_the_orchestrator_at_start(
        site: Path, tmp_path: Path) -> None:
    """A twin package (another name, the same study) claims example.echo too: the app
    does not start, and says which two and what to do."""
    twin = tmp_path / "echo-twin"
    shutil.copytree(PACKAGE, twin)
    pyproject = twin / "pyproject.toml"
    pyproject.write_text(pyproject.read_text()
                         .replace('name = "testbed-echo-study"', 'name = "testbed-echo-twin"')
                         .replace('echo = "echo_study:STUDY"', 'echo-twin = "echo_study:STUDY"'))
    _pip_install(twin, site)
    _forget_studies()
    with pytest.raises(StudyLoadError, match=r"'example.echo' is claimed by two studies: "
                       r"echo = .*testbed-echo-study.* and echo-twin = .*testbed-echo-twin.*"
                       r"uninstall one of them"):
        create_app(make_settings(tmp_path), clock=ManualClock(), reaper=False)
