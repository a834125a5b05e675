"""What Prometheus scrapes for the alert rules (deploy/prometheus/rules): each node's
heartbeat figures, runs ended per operator, the ingest backlog and the archive disk,
read from a real orchestrator app on a real database (SQLite and PostgreSQL), with a
manual clock. The rules themselves are tested by promtool (test_alert_rules.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.api.app import create_app
from orchestrator.settings import InfluxSettings
from testbed_common import wire
from tests.conftest import ManualClock
from tests.integration.conftest import Api, make_settings
from tests.integration.test_fleet_page import figures_listed, mixed_fleet
from tests.integration.test_out_of_contact import _upload

SCRAPE = "scrape-token-0123456789"
#: Nothing listens on the discard port: the store is "down", archived runs wait.
NO_INFLUX = InfluxSettings(url="http://127.0.0.1:9")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(api: Api, token: str | None = SCRAPE) -> Samples:
    """Every sample of ``/metrics`` keyed by name and labels, as Prometheus stores it."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = api.client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def named(samples: Samples, prefix: str) -> list[str]:
    return sorted({name for name, _ in samples if name.startswith(prefix)})


def make_api(tmp_path: Path, clock: ManualClock, database_url: str,
             **overrides: object) -> Iterator[Api]:
    settings = make_settings(tmp_path).model_copy(update={
        "database_url": database_url, "metrics_token": SCRAPE, **overrides})
    app = create_app(settings, clock=clock, reaper=False)
    with TestClient(app) as client:
        yield Api(client, clock, settings)
    app.state.ctx.db.engine.dispose()


@pytest.fixture
def api(tmp_path: Path, clock: ManualClock, database_url: str) -> Iterator[Api]:
    yield from make_api(tmp_path, clock, database_url)


def beat(api: Api, token: str, **figures: object) -> None:
    hb = wire.Heartbeat.model_validate({
        "sent_at": api.clock.now(), "interfaces": [], "disk_free_bytes": 10**9, **figures})
    r = api.client.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=api.node(token),
                        json=hb.model_dump(mode="json"))
    assert r.status_code == 200, r.text


def test_each_nodes_heartbeat_figures_are_shown_to_the_scraper_only(api: Api) -> None:
    se01 = api.add_node("se-01", [("op0", "240-01", "Telia"), ("op1", "240-07", "Tele2")])
    api.add_node("se-02", [("op0", "240-01", "Telia")])
    r = api.client.post("/api/v1/nodes", headers=api.admin, json={"id": "no-01",
                                                                    "country": "NO"})
    assert r.status_code == 201, r.text  # provisioned, never registered: "new"
    hb = api.settings.health
    api.clock.advance(hb.heartbeat_interval_s * hb.offline_after_beats + 1)  # se-02 silent
    beat(api, se01, clock_offset_s=-1.5, disk_free_bytes=700_000_000, spooled_bundles=3)
    api.clock.advance(7)

    full = scrape(api)
    for node, health in (("se-01", "online"), ("se-02", "offline"), ("no-01", "new")):
        assert sample(full, "testbed_node_health", node=node, health=health) == 1
    # one series per node, whatever its health: the others are absent, not 0
    assert sum(1 for name, _ in full if name == "testbed_node_health") == 3
    assert sample(full, "testbed_node_heartbeat_age_seconds", node="se-01") == 7
    assert sample(full, "testbed_node_heartbeat_age_seconds", node="se-02") == 608
    assert sample(full, "testbed_node_heartbeat_age_seconds", node="no-01") is None
    assert sample(full, "testbed_node_clock_offset_seconds", node="se-01") == -1.5
    assert sample(full, "testbed_node_disk_free_bytes", node="se-01") == 700_000_000
    assert sample(full, "testbed_node_spooled_bundles", node="se-01") == 3
    assert sample(full, "testbed_quota_limit_bytes", node="se-01", interface="op1",
                  mcc_mnc="240-07") is not None
    assert sample(full, "testbed_nodes", health="offline") == 1

    public = scrape(api, token=None)
    assert named(public, "testbed_node_") == [] and named(public, "testbed_quota_") == []
    assert sample(public, "testbed_nodes", health="online") == 1
    # counted by the database for the public view, from each node's row for the full one
    assert {k: v for k, v in public.items() if k[0] == "testbed_nodes"} == {
        k: v for k, v in full.items() if k[0] == "testbed_nodes"}
    assert sample(public, "testbed_nodes", health="new") == 1


def test_each_sims_quota_series_are_the_listings_figures(api: Api) -> None:
    """The per-SIM series, summed by the database (quotas.sim_figures; the listing cost
    5.6 s of a worker's CPU per scrape at 10,000 nodes), show each reported SIM's figures
    as the quota listing has them: used, reserved and overrun for every SIM, the limit
    for those with a cap; no series for a quota whose interface is not reported yet."""
    mixed_fleet(api)
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    for default in (ctx.settings.scheduling.default_sim_cap_bytes, None):
        ctx.settings.scheduling.default_sim_cap_bytes = default
        full = scrape(api)
        series = {(name, labels): value for (name, labels), value in full.items()
                  if name.startswith("testbed_quota_")}
        listed = figures_listed(ctx)
        expected = {}
        for f in listed.values():
            labels = frozenset({"node": f.node, "interface": f.interface,
                                "mcc_mnc": f.mcc_mnc}.items())
            for key, value in (("used", f.used), ("reserved", f.reserved),
                               ("overrun", f.overrun), ("limit", f.limit)):
                if value is not None:
                    expected[(f"testbed_quota_{key}_bytes", labels)] = float(value)
        assert series == expected
        assert sample(full, "testbed_quota_used_bytes", node="se-01", interface="op0",
                      mcc_mnc="240-01") == 850_000_000
    assert sample(full, "testbed_quota_limit_bytes", node="se-01", interface="op1",
                  mcc_mnc="240-07") is None  # without a cap, no limit series


def test_runs_ended_in_the_last_hour_are_counted_per_operator(api: Api) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia"), ("op1", "240-07", "Tele2")])
    old = api.submit("se-01", "op0", duration_s=10)
    api.heartbeat(token)
    assert api.report(token, old["id"], "failed", "modem gone").status_code == 204
    api.clock.advance(3601)  # out of the window
    api.heartbeat(token)
    fresh = [api.submit("se-01", "op1", duration_s=10) for _ in range(2)]
    api.heartbeat(token)
    assert api.report(token, fresh[0]["id"], "failed", "modem gone").status_code == 204
    r = api.client.post(f"/api/v1/runs/{fresh[1]['id']}/cancel", headers=api.admin,
                        json={"reason": "not needed"})
    assert r.status_code == 200, r.text

    samples = scrape(api, token=None)  # no node ids: public
    ended = {dict(labels)["mcc_mnc"] + "/" + dict(labels)["state"]: value
             for (name, labels), value in samples.items() if name == "testbed_runs_ended"}
    assert ended == {"240-07/failed": 1, "240-07/cancelled": 1, "240-07/done": 0,
                     "240-07/expired": 0}
    assert sample(samples, "testbed_runs", state="failed") == 2  # all time, as before


def test_the_ingest_backlog_and_the_archive_disk(tmp_path: Path, clock: ManualClock,
                                                 database_url: str) -> None:
    for api in make_api(tmp_path, clock, database_url, influx=NO_INFLUX):
        token = api.add_node("se-01", [("op0", "240-01", "Telia")])
        run = api.submit("se-01", duration_s=10)
        api.heartbeat(token)
        for state in ("deploying", "running", "uploading"):
            assert api.report(token, run["id"], state).status_code == 204
        samples = scrape(api, token=None)
        assert sample(samples, "testbed_ingest_pending_runs") == 0
        assert sample(samples, "testbed_ingest_oldest_pending_age_seconds") == 0

        assert _upload(api, token, run["id"], tmp_path)["complete"]
        api.clock.advance(95)  # the store stays down: the archived run waits
        samples = scrape(api, token=None)
        assert sample(samples, "testbed_ingest_pending_runs") == 1
        assert sample(samples, "testbed_ingest_oldest_pending_age_seconds") == 95
        free = sample(samples, "testbed_archive_disk_free_bytes")
        size = sample(samples, "testbed_archive_disk_size_bytes")
        assert free is not None and size is not None and 0 < free <= size


def test_no_ingest_series_without_a_time_series_store(api: Api) -> None:
    """No store configured: nothing is ever ingested, which is no lag to alert on."""
    assert named(scrape(api), "testbed_ingest_") == []

