"""Dataset releases through the HTTP API (services.releases), on SQLite and PostgreSQL.

Real parts: the app with its background build job, a campaign's runs uploaded through
the agent API (tests/integration/test_dataset.py's campaign), the release built,
served, verified and compared byte for byte with the CLI's build of the same key.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.services.context import Context
from orchestrator.store.tables import DatasetRelease
from tests.integration.conftest import Api
from tests.integration.test_dataset import build, files, finished_campaign

REPO = Path(__file__).resolve().parents[2]
#: A release of four small runs builds in a few seconds; a loaded machine may be slower.
BUILD_TIMEOUT_S = 120


def wait_idle(api: Api, release_id: str, headers: dict[str, str] | None = None
              ) -> dict[str, Any]:
    """The release once no job runs on it."""
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while True:
        r = api.client.get(f"/api/v1/datasets/{release_id}", headers=headers or api.admin)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        if body["job"] is None:
            return body
        assert time.monotonic() < deadline, f"release job still running: {body}"
        time.sleep(0.2)


def user(api: Api, name: str, project: str) -> dict[str, str]:
    if project != "default":
        api.client.post("/api/v1/projects", headers=api.admin, json={"name": project})
    r = api.client.post("/api/v1/users", headers=api.admin,
                        json={"name": name, "projects": [project]})
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


def test_a_release_built_through_the_api_is_served_verified_and_the_clis_bytes(
        api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    campaign = finished_campaign(api, tmp_path)
    body = {"campaigns": [campaign], "key": "november", "raw": True, "version": "2026.11.22",
            "exclude": ["node:se-02=owner withdrew consent"],
            "link_profiles": {"se-01/op0": "rate_mbit: 10\n"}}
    r = api.client.post("/api/v1/datasets", headers=api.admin, json=body)
    assert r.status_code == 202, r.text
    started = r.json()
    assert (started["state"], started["job"], started["runs_total"]) == ("building", "build", 4)
    assert started["key"] == "november" and started["created_by"] == "admin"
    release = wait_idle(api, started["id"])
    assert release["state"] == "ready", release
    assert release["runs"] == 2 and release["rows"]["runs"] == 2
    assert release["problems"] == [] and release["verified_at"] is not None
    assert {e["reason"] for e in release["excluded"]} == {
        "node se-02: owner withdrew consent"}
    listed = api.client.get("/api/v1/datasets", headers=api.admin).json()
    assert [x["id"] for x in listed] == [release["id"]]

    descriptor = api.client.get(f"/api/v1/datasets/{release['id']}/datapackage.json",
                                headers=api.admin)
    assert descriptor.status_code == 200, descriptor.text
    assert descriptor.json()["version"] == "2026.11.22"
    r = api.client.get(f"/api/v1/datasets/{release['id']}/files", headers=api.admin)
    assert r.status_code == 200, r.text
    served: dict[str, bytes] = {}
    for f in r.json():
        got = api.client.get(f"/api/v1/datasets/{release['id']}/files/{f['path']}",
                             headers=api.admin)
        assert got.status_code == 200, (f, got.text)
        assert len(got.content) == f["bytes"]
        assert hashlib.sha256(got.content).hexdigest() == f["sha256"]
        assert got.headers["digest"] == f"sha-256={f['sha256']}"
        served[f["path"]] = got.content
    assert len(served) == release["files"] and "link-profiles/se-01-op0.yaml" in served
    assert sum(len(d) for d in served.values()) == release["bytes"]
    assert "SHA256SUMS" in served and "raw/" in "".join(served)

    # the CLI with the same key writes the same bytes: one builder, keys kept apart
    key = api.settings.datasets.keys_dir / "november.key"
    assert key.exists() and key.stat().st_mode & 0o777 == 0o600
    assert not any("november" in p for p in served)
    profile = tmp_path / "telia.yaml"
    profile.write_text("rate_mbit: 10\n")
    out = build(api, monkeypatch, "build", campaign, "--key-file", str(key), "--raw",
                "--version", "2026.11.22", "--exclude", "node:se-02=owner withdrew consent",
                "--link-profile", f"se-01/op0={profile}", "--out", str(tmp_path / "cli"))
    assert out.exit_code == 0, out.output
    assert files(tmp_path / "cli") == served

    # verified again on demand: damage on the disk is found and named
    root = api.settings.datasets.dir / release["id"]
    (root / "tables/runs.csv").write_text("run\n")
    r = api.client.post(f"/api/v1/datasets/{release['id']}/verify", headers=api.admin)
    assert r.status_code == 202 and r.json()["job"] == "verify", r.text
    checked = wait_idle(api, release["id"])
    assert any(p.startswith("tables/runs.csv: SHA-256") for p in checked["problems"]), checked

    gone = api.client.delete(f"/api/v1/datasets/{release['id']}", headers=api.admin)
    assert gone.status_code == 204, gone.text
    assert not root.exists() and key.exists()  # the key stays: the same bytes again
    r = api.client.get(f"/api/v1/datasets/{release['id']}", headers=api.admin)
    assert r.status_code == 404 and "no dataset release" in r.json()["detail"]


def test_the_release_api_says_what_is_wrong_and_who_may_do_what(
        api: Api, tmp_path: Path) -> None:
    campaign = finished_campaign(api, tmp_path)
    member, stranger = user(api, "ann", "default"), user(api, "bob", "elsewhere")
    post = "/api/v1/datasets"

    refused = api.client.post(post, headers=member, json={"campaigns": [campaign]})
    assert refused.status_code == 403 and "not an administrator" in refused.json()["detail"]
    for body, status, says in (
        ({"campaigns": ["c-nope"]}, 404, "no campaign 'c-nope'"),
        ({"campaigns": [campaign], "daily": "2026-01-01"}, 404, "no finished run"),
        ({"campaigns": [campaign], "licence": "WTFPL"}, 422, "WTFPL"),
        ({"campaigns": [campaign], "daily": "2026-11-22", "from_day": "2026-11-22"}, 422,
         "daily sets the period"),
        ({"campaigns": [campaign], "from_day": "2026-11-23", "to_day": "2026-11-22"}, 422,
         "before from_day"),
        ({"campaigns": [campaign], "grid_deg": 11}, 422, "grid_deg"),
        ({"campaigns": [campaign], "exclude": ["se-02"]}, 422, "KIND:ID=REASON"),
        ({"campaigns": [campaign], "key": "../etc/passwd"}, 422, "body.key"),
        ({"campaigns": [campaign], "link_profiles": {"se-01": "x"}}, 422, "link_profiles"),
        ({"campaigns": [campaign] * 2 + [f"c-{n}" for n in range(20)]}, 422, "campaigns"),
        ({"campaigns": []}, 422, "campaigns"),
        ({"campaigns": [campaign], "colour": "red"}, 422, "colour"),
        ({"campaigns": [campaign], "previous": "ds-none"}, 404, "ds-none"),
    ):
        r = api.client.post(post, headers=api.admin, json=body)
        assert r.status_code == status and says in r.json()["detail"], (body, r.text)
    assert api.client.get(post, headers=api.admin).json() == []  # nothing recorded
    assert not api.settings.datasets.keys_dir.exists() or not any(
        api.settings.datasets.keys_dir.iterdir())  # and no key made

    # a job of another replica holds the one slot: 409 naming it, until it falls silent
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    now = api.clock.now()
    with ctx.db.session() as s:
        s.add(DatasetRelease(
            id="ds-elsewhere", state="building", job="build", campaigns=[campaign],
            options={}, version="1.0.0", key_name="k", created_by="admin", created_at=now,
            updated_at=now, runs_read=1, runs_total=4))
    busy = api.client.post(post, headers=api.admin, json={"campaigns": [campaign]})
    assert busy.status_code == 409, busy.text
    assert "ds-elsewhere (build)" in busy.json()["detail"]
    assert busy.json()["running"] == ["ds-elsewhere"]
    early = api.client.get("/api/v1/datasets/ds-elsewhere/files", headers=api.admin)
    assert early.status_code == 409 and "only a ready release" in early.json()["detail"]

    api.clock.advance(3 * api.settings.datasets.heartbeat_s + 1)  # its process died
    r = api.client.post(post, headers=api.admin, json={"campaigns": [campaign]})
    assert r.status_code == 202, r.text
    dead = api.client.get("/api/v1/datasets/ds-elsewhere", headers=api.admin).json()
    assert dead["state"] == "failed" and dead["error"].startswith("interrupted")
    release = wait_idle(api, r.json()["id"])
    assert release["state"] == "ready", release

    # reading: whoever may read every campaign in it; the rest are told it is not there
    rid = release["id"]
    assert api.client.get(f"/api/v1/datasets/{rid}", headers=member).status_code == 200
    readme = api.client.get(f"/api/v1/datasets/{rid}/files/README.md", headers=member)
    assert readme.status_code == 200 and readme.headers["content-type"].startswith(
        "text/markdown")
    for path in (f"/api/v1/datasets/{rid}", f"/api/v1/datasets/{rid}/files",
                 f"/api/v1/datasets/{rid}/datapackage.json"):
        hidden = api.client.get(path, headers=stranger)
        assert hidden.status_code == 404, (path, hidden.text)
    assert [x["id"] for x in api.client.get(post, headers=stranger).json()] == []
    assert api.client.post(f"/api/v1/datasets/{rid}/verify",
                           headers=member).status_code == 403
    assert api.client.delete(f"/api/v1/datasets/{rid}", headers=member).status_code == 403
    # only the files SHA256SUMS lists are served, however the path is spelt
    for path in ("nothing.txt", "../release-keys/k.key", "tables/../../x", "%2e%2e/x"):
        r = api.client.get(f"/api/v1/datasets/{rid}/files/{path}", headers=api.admin)
        assert r.status_code in (404, 422), (path, r.status_code, r.text)
    assert api.client.get("/api/v1/datasets?limit=0", headers=api.admin).status_code == 422
    assert api.client.get(post, headers={}).status_code == 401


def test_without_the_dataset_extra_the_orchestrator_runs_and_says_what_is_missing(
        tmp_path: Path) -> None:
    """The node image has no pyarrow, frictionless or yacryptopan; an orchestrator
    installed without the extra starts, and only the release routes answer 501."""
    script = f"""
import sys
for name in ("pyarrow", "frictionless", "yacryptopan"):
    sys.modules[name] = None  # import fails as if not installed
from fastapi.testclient import TestClient
from orchestrator.api.app import create_app
from orchestrator.cli.main import cli
from tests.integration.conftest import ADMIN, make_settings
from pathlib import Path
app = create_app(make_settings(Path({str(tmp_path)!r})), reaper=False)
with TestClient(app) as client:
    auth = {{"Authorization": "Bearer " + ADMIN}}
    assert client.get("/api/v1/nodes", headers=auth).status_code == 200
    r = client.post("/api/v1/datasets", headers=auth, json={{"campaigns": ["c-1"]}})
    print(r.status_code, r.json()["detail"])
app.state.ctx.db.engine.dispose()
from click.testing import CliRunner
said = CliRunner().invoke(cli, ["dataset", "verify", {str(tmp_path)!r}])
print(said.exit_code, said.output.strip())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    api_says, cli_says = done.stdout.splitlines()
    assert api_says.startswith("501 dataset releases need the 'dataset' extra"), api_says
    assert "mbb-testbed[orchestrator,dataset]" in api_says
    assert cli_says.startswith("1 Error: dataset releases need the 'dataset' extra"), cli_says


def test_silent_jobs_are_told_apart_by_the_heartbeat(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """A verification whose process died is dropped with a problem saying so; a live
    job's heartbeat stamps its row, which keeps it from that fate."""
    from orchestrator.services.releases import _Heartbeat

    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    silence = timedelta(seconds=3 * ctx.settings.datasets.heartbeat_s + 1)
    now = api.clock.now()
    with ctx.db.session() as s:
        for rid in ("ds-checking", "ds-alive"):
            s.add(DatasetRelease(
                id=rid, state="ready", job="verify", campaigns=[], options={},
                version="1.0.0", key_name="k", created_by="admin", created_at=now,
                updated_at=now - silence, runs_read=0, runs_total=0))
    monkeypatch.setattr(ctx, "settings", ctx.settings.model_copy(update={
        "datasets": ctx.settings.datasets.model_copy(update={"heartbeat_s": 0.05})}))
    with _Heartbeat(ctx, "ds-alive") as beat:
        beat.progress(3, 4)
        time.sleep(0.5)
    r = api.client.get("/api/v1/datasets/ds-checking", headers=api.admin).json()
    assert r["job"] is None and r["state"] == "ready"
    assert r["problems"][0].startswith("interrupted: no sign of the verify job")
    alive = api.client.get("/api/v1/datasets/ds-alive", headers=api.admin).json()
    assert alive["job"] == "verify" and alive["problems"] is None
    assert (alive["runs_read"], alive["runs_total"]) == (3, 4)


def test_exclusions_over_the_api_are_recorded_listed_applied_and_dropped(
        api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Administrators leave a SIM out of every release with a reason, over the API as
    with ``testbed dataset exclude`` (one record: the CLI lists it); a typo is refused
    rather than leaving out nothing; dropped, the next release has the data again."""
    from tests.integration.test_dataset import build

    campaign = finished_campaign(api, tmp_path)
    member = user(api, "ann", "default")
    url = "/api/v1/dataset-exclusions"
    body = {"kind": "sim", "target": "se-02/op0", "reason": "SIM lent to another project"}
    for method, path in (("GET", url), ("POST", url), ("DELETE", f"{url}/1")):
        r = api.client.request(method, path, headers=member,
                               json=body if method == "POST" else None)
        assert r.status_code == 403 and "not an administrator" in r.json()["detail"], r.text
    for bad, status, says in (
        ({**body, "target": "se-02"}, 422, "NODE/INTERFACE"),
        ({**body, "kind": "campaign"}, 422, "body.kind"),
        ({**body, "reason": ""}, 422, "body.reason"),
        ({**body, "target": "se-99/op0"}, 404, "no node 'se-99'"),
        ({"kind": "run", "target": "r-none", "reason": "x"}, 404, "no run 'r-none'"),
    ):
        r = api.client.post(url, headers=api.admin, json=bad)
        assert r.status_code == status and says in r.json()["detail"], (bad, r.text)
    assert api.client.get(url, headers=api.admin).json() == []  # none of those recorded

    first = api.client.post(url, headers=api.admin, json={**body, "reason": "first reason"})
    assert first.status_code == 201, first.text
    again = api.client.post(url, headers=api.admin, json=body)  # a new reason replaces it
    assert again.status_code == 201 and again.json()["id"] == first.json()["id"], again.text
    listed = api.client.get(url, headers=api.admin).json()
    assert [(e["rule"], e["reason"]) for e in listed] == [
        ("sim:se-02/op0", "SIM lent to another project")]
    said = build(api, monkeypatch, "exclusions")
    assert said.output == "sim:se-02/op0\tSIM lent to another project\n", said.output

    r = api.client.post("/api/v1/datasets", headers=api.admin, json={"campaigns": [campaign]})
    assert r.status_code == 202, r.text
    release = wait_idle(api, r.json()["id"])
    assert release["state"] == "ready" and release["runs"] == 2, release
    assert {e["reason"] for e in release["excluded"]} == {
        "sim se-02/op0: SIM lent to another project"}

    gone = api.client.delete(f"{url}/{first.json()['id']}", headers=api.admin)
    assert gone.status_code == 204, gone.text
    assert api.client.get(url, headers=api.admin).json() == []
    again_gone = api.client.delete(f"{url}/{first.json()['id']}", headers=api.admin)
    assert again_gone.status_code == 404 and "GET /api/v1/dataset-exclusions" in (
        again_gone.json()["detail"])
    r = api.client.post("/api/v1/datasets", headers=api.admin, json={"campaigns": [campaign]})
    assert r.status_code == 202, r.text
    release = wait_idle(api, r.json()["id"])
    assert release["runs"] == 4 and release["excluded"] == [], release
