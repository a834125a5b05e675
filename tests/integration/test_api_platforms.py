"""Heterogeneous nodes through the HTTP API on a real database: a node reports its
architecture, an arm64 node gets no run of an amd64-only experiment (a campaign defers
with the reason, a direct submit is refused saying what to do), and an old agent that
reports none is taken as amd64."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from testbed_common import wire
from tests.integration.conftest import Api
from tests.integration.test_campaign_planner import cli, submit


def register(api: Api, node_id: str, **report: Any) -> str:
    r = api.client.post("/api/v1/nodes", headers=api.admin,
                        json={"id": node_id, "country": "SE"})
    assert r.status_code == 201, r.text
    token: str = r.json()["token"]
    reg = wire.Registration(agent_version="test", interfaces=[wire.InterfaceReport(
        name="op0", operator=wire.Operator(mcc_mnc="240-01", name="Telia"))], **report)
    r = api.client.post(f"{wire.AGENT_PREFIX}/register", headers=api.node(token),
                        json=reg.model_dump(mode="json"))
    assert r.status_code == 200, r.text
    return token


def nodes(api: Api) -> dict[str, dict[str, Any]]:
    r = api.client.get("/api/v1/nodes", headers=api.admin)
    assert r.status_code == 200, r.text
    return {n["id"]: n for n in r.json()}


def test_nodes_report_their_architecture_and_an_arm64_node_gets_no_amd64_run(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    register(api, "se-01", architecture="amd64")
    register(api, "de-01", architecture="aarch64", native_tools=False)  # as uname says it
    shown = nodes(api)
    assert shown["se-01"]["architecture"] == "amd64"
    assert shown["de-01"]["architecture"] == "arm64"
    assert "no-native-tools" in shown["de-01"]["tags"]
    assert "no-native-tools" not in shown["se-01"]["tags"]
    listed = cli(api, monkeypatch, "node", "list")
    assert "arm64" in listed

    r = api.client.post("/api/v1/runs", headers=api.admin, json={
        "experiment": "tat", "node": "de-01", "interface": "op0", "parameters": {}})
    assert 400 <= r.status_code < 500, r.text
    detail = r.json()["detail"]
    assert "architecture: node de-01 is arm64, experiment tat provides linux/amd64" in detail
    assert "pick a node of an architecture it provides" in detail
    assert api.submit("se-01")["state"] == "scheduled"

    t0 = api.clock.now()
    out = submit(api, {
        "version": 2, "name": "tat-everywhere", "project": "default",
        "steps": [{"experiment": "tat", "parameters": {"duration_s": 5}}],
        "recurrence": {"kind": "every", "hours": 1, "start": t0.isoformat(),
                       "end": (t0 + timedelta(hours=2)).isoformat()},
    })
    assert {run["node"] for run in out["runs"]} == {"se-01"}
    [d] = out["decisions"]
    assert (d["kind"], d["code"], d["node"]) == ("deferred", "architecture", "de-01")
    assert d["message"] == ("deferred: architecture: node de-01 is arm64, experiment tat "
                            "provides linux/amd64")
    assert "deferred (architecture)" in cli(api, monkeypatch, "campaign", "list")
    page = api.client.get("/pages/campaigns", headers=api.admin)
    assert page.status_code == 200
    assert "node de-01 is arm64" in page.text


def test_an_agent_that_reports_no_architecture_keeps_its_node_amd64(api: Api) -> None:
    register(api, "se-02")  # an old agent: no architecture, no native_tools
    node = nodes(api)["se-02"]
    assert node["architecture"] == "unknown"  # as stored: nothing was reported
    assert "no-native-tools" not in node["tags"]
    assert api.submit("se-02")["state"] == "scheduled"  # taken as amd64
