"""The arm64 node under emulation (issue 34, heterogeneous nodes): the compose profile
``arm64`` brought up with scripts/up-arm64 (the arm64 base from Debian's packages, the
node agent's image with aarch64 wheels from PyPI, the arm64 experiment image, all run
under qemu-user-static), its agent registers as arm64 by itself (it reads the machine),
runs the `machine` experiment (arm64 only, no native tool) to done, and a campaign of
tat (amd64 only, native tools) defers on it with the architecture reason, while a
direct submit is refused saying what to do.

Slow on two cores: the images' first build takes minutes under emulation (cached after),
the agent's start tens of seconds."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import FINAL, Fleet, script, story

pytestmark = pytest.mark.e2e

NODE = "de-01"


def test_an_arm64_node_runs_arm64_experiments_and_defers_amd64_ones(fleet: Fleet) -> None:
    started = time.monotonic()
    script("up-arm64", timeout=1800)
    print(f"scripts/up-arm64: {time.monotonic() - started:.0f} s")
    node = fleet.get(f"/api/v1/nodes/{NODE}")
    assert node["health"] == "online"
    assert node["architecture"] == "arm64"  # the agent read it: its config names none
    assert "no-native-tools" in node["tags"]
    assert f"{NODE} " in fleet.cli("node", "list")
    assert "arm64" in fleet.cli("node", "list")
    page = fleet.http.get("/pages/fleet")
    assert page.status_code == 200 and "arm64" in page.text

    submitted = time.monotonic()
    run_id = fleet.submit(NODE, "op0", experiment="machine")
    run = fleet.wait(run_id, FINAL, timeout_s=300)
    print(f"machine on {NODE}: submitted to {run['state']} in "
          f"{time.monotonic() - submitted:.0f} s")
    assert run["state"] == "done", story(run)
    print(story(run))  # each phase's time: what a run costs under emulation
    result = fleet.get(f"/api/v1/runs/{run_id}/result")
    assert (result["format"], result["machine"]) == ("testbed.machine", "aarch64")

    refused = fleet.http.post("/api/v1/runs", json={
        "experiment": "tat", "node": NODE, "interface": "op0", "parameters": {}})
    assert 400 <= refused.status_code < 500, refused.text
    assert (f"architecture: node {NODE} is arm64, experiment tat provides linux/amd64"
            in refused.json()["detail"])

    r = fleet.http.post("/api/v1/campaigns", json={
        "version": 2, "name": "tat-on-arm64", "project": "default", "nodes": [NODE],
        "steps": [{"experiment": "tat", "parameters": {"duration_s": 5}}]})
    assert r.status_code == 201, r.text
    campaign = r.json()
    try:
        assert campaign["runs"] == []
        assert [(d["kind"], d["code"], d["node"]) for d in campaign["decisions"]] == [
            ("deferred", "architecture", NODE)]
        assert "deferred (architecture)" in fleet.cli("campaign", "list")
    finally:
        fleet.http.post(f"/api/v1/campaigns/{campaign['id']}/cancel")
