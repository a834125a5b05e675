"""Alerting through the compose stack: Prometheus scrapes the orchestrator with the
metrics token, and stopping a fleet node fires ``TestbedNodeOffline`` in Alertmanager
for that node alone (its stale alert inhibited by it), which resolves when the node is
back (docs/monitoring.md).

The stack's heartbeats (2 s, offline after 20 s) and scrape and evaluation intervals
(5 s) are compressed; with the rule's ``for: 1m`` the alert arrives about 1.5 minutes
after the stop (12 minutes at production settings). The node stopped is no-01, so that
the minutes of waiting go side by side with test_fleet's compressed hourly campaign on
se-01 and se-02 (conftest's ``SideBySide``)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import REPO
from tests.e2e.chaos import container, docker
from tests.e2e.conftest import Fleet, SideBySide

PROMETHEUS = "http://127.0.0.1:9090"
ALERTMANAGER = "http://127.0.0.1:9093"
NODE = "no-01"
#: Every node scripts/up provisions.
FLEET = {n["id"] for n in yaml.safe_load(
    (REPO / "deploy/fleet/nodes.yaml").read_text())["nodes"]}
OFFLINE = "TestbedNodeOffline"


def query(promql: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{PROMETHEUS}/api/v1/query", params={"query": promql}, timeout=10)
    r.raise_for_status()
    result: list[dict[str, Any]] = r.json()["data"]["result"]
    return result


def alerts(name: str) -> list[dict[str, Any]]:
    """Alertmanager's alerts of that name (API v2: active, suppressed or not yet
    processed; resolved ones are gone)."""
    r = httpx.get(f"{ALERTMANAGER}/api/v2/alerts", params={"filter": f'alertname="{name}"'},
                  timeout=10)
    r.raise_for_status()
    out: list[dict[str, Any]] = r.json()
    return out


def until(what: str, timeout_s: float, check: Any) -> Any:
    """``check()`` polled every 2 s until it returns something truthy, which is returned."""
    end = time.monotonic() + timeout_s
    while not (got := check()):
        assert time.monotonic() < end, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(2)
    return got


def node_stopped(fleet: Fleet) -> None:
    """The test below, run side by side with test_fleet's compressed hourly campaign."""
    # Prometheus reads the per-node series: the metrics token reached both sides
    until("Prometheus sees every node online", 90, lambda: {
        s["metric"]["node"] for s in query('testbed_node_health{health="online"}')} == FLEET)
    assert alerts(OFFLINE) == []

    stopped = time.monotonic()
    docker("stop", container(NODE))
    try:
        fired = until(f"{OFFLINE} for {NODE} in Alertmanager", 240, lambda: [
            a for a in alerts(OFFLINE) if a["labels"].get("node") == NODE])
        took = time.monotonic() - stopped
        print(f"{OFFLINE} for {NODE} in Alertmanager {took:.0f} s after docker stop")
        [alert] = fired
        assert alert["labels"]["severity"] == "warning"
        assert alert["status"]["state"] == "active"
        assert f"node {NODE} is offline" in alert["annotations"]["summary"]
        # stale (6 s) and offline (20 s) first, then the rule's minute: not sooner
        assert 60 < took < 180
        # the nodes still heartbeating raise nothing
        assert {a["labels"]["node"] for a in alerts(OFFLINE)} == {NODE}
        # the orchestrator says the same as the alert
        assert fleet.get(f"/api/v1/nodes/{NODE}")["health"] == "offline"
        # its stale alert (which fired first) is now said once, by the offline one
        until(f"TestbedNodeStale for {NODE} inhibited by {OFFLINE}", 30, lambda: [
            a for a in alerts("TestbedNodeStale") if a["labels"].get("node") == NODE
            and a["status"]["state"] == "suppressed"
            and a["status"]["inhibitedBy"] == [alert["fingerprint"]]])
    finally:
        docker("start", container(NODE))

    fleet.wait_online(NODE, timeout_s=90)
    until(f"{OFFLINE} for {NODE} resolved in Alertmanager", 60, lambda: not [
        a for a in alerts(OFFLINE) if a["labels"].get("node") == NODE])


@pytest.mark.side_by_side("minutes", node_stopped)
def test_a_stopped_node_fires_the_offline_alert_in_alertmanager(
        side_by_side: SideBySide) -> None:
    side_by_side.result(node_stopped)
