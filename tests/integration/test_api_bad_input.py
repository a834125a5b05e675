"""Bad input gets a clear 4xx naming the problem, and stored state does not change."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.api.app import create_app
from orchestrator.catalogue.manifest import ManifestError
from orchestrator.settings import Settings
from testbed_common import wire
from tests.integration.conftest import Api, make_settings


def test_unknown_node_token_is_refused(api: Api) -> None:
    hb = {"sent_at": "2026-11-22T12:00:00Z", "interfaces": [], "disk_free_bytes": 1}
    r = api.client.post(f"{wire.AGENT_PREFIX}/heartbeat", json=hb,
                        headers={"Authorization": "Bearer not-a-node"})
    assert r.status_code == 401
    assert "unknown node token" in r.json()["detail"]


def test_unknown_and_invalid_parameters_are_named(api: Api) -> None:
    api.add_node("se-01", [("op0", "240-01", "Telia")])
    body = {"experiment": "tat", "node": "se-01", "interface": "op0",
            "parameters": {"duration_s": 5, "turbo": True}}
    r = api.client.post("/api/v1/runs", headers=api.admin, json=body)
    assert r.status_code == 422 and "turbo" in r.json()["detail"]
    body["parameters"] = {"duration_s": -3}
    r = api.client.post("/api/v1/runs", headers=api.admin, json=body)
    assert r.status_code == 422 and "duration_s" in r.json()["detail"]
    assert api.client.get("/api/v1/runs", headers=api.admin).json() == []


def test_unknown_node_interface_and_experiment(api: Api) -> None:
    api.add_node("se-01", [("op0", "240-01", "Telia")])
    for body, needle in (
        ({"experiment": "tat", "node": "xx-99", "interface": "op0"}, "unknown node"),
        ({"experiment": "tat", "node": "se-01", "interface": "op7"}, "no interface 'op7'"),
        ({"experiment": "warp", "node": "se-01", "interface": "op0"}, "unknown experiment"),
    ):
        r = api.client.post("/api/v1/runs", headers=api.admin, json=body)
        assert r.status_code == 422, r.text
        assert needle in r.json()["detail"]


def test_expired_user_token_is_refused_with_advice(api: Api) -> None:
    r = api.client.post("/api/v1/users", headers=api.admin,
                        json={"name": "alice", "token_days": 1})
    token = r.json()["token"]
    assert api.client.get("/api/v1/me", headers=api.node(token)).status_code == 200
    api.clock.advance(2 * 86400)
    r = api.client.get("/api/v1/me", headers=api.node(token))
    assert r.status_code == 401 and "expired" in r.json()["detail"]


def test_non_admin_cannot_provision_nodes(api: Api) -> None:
    token = api.client.post("/api/v1/users", headers=api.admin,
                            json={"name": "bob"}).json()["token"]
    r = api.client.post("/api/v1/nodes", headers=api.node(token),
                        json={"id": "se-09", "country": "SE"})
    assert r.status_code == 403


def test_malformed_experiment_manifest_stops_startup_naming_file(tmp_path: Path) -> None:
    bad = tmp_path / "catalogue" / "broken"
    bad.mkdir(parents=True)
    (bad / "experiment.yaml").write_text(
        "name: broken\nversion: 1\nimage: x\nresult: {file: a, format: b, version: 1}\n"
        "duration_s: 'import os'\ndata_volume_bytes: 1\n"
    )
    settings = make_settings(tmp_path).model_copy(
        update={"experiments_dir": tmp_path / "catalogue"})
    with pytest.raises(ManifestError, match=r"broken/experiment.yaml.*duration_s|not valid"):
        create_app(settings, reaper=False)


def test_placeholder_admin_token_refused_outside_development() -> None:
    with pytest.raises(ValueError, match="TESTBED_ADMIN_TOKEN"):
        Settings(environment="production", admin_token="change-me")
