"""What an operator checks of ``/metrics`` while the fleet heartbeats: a real
orchestrator process (uvicorn, SQLite), nodes heartbeating as fast as a few threads can
send, and Prometheus's full-view scrapes beside them. Every scrape answers with every
node's and every SIM's series, and their values are what the nodes last reported and
what the quota listing holds."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed_common import wire
from tests.integration.live import Live, orchestrator

SCRAPE = "scrape-token-under-load-0123"
NODES = 24
SIMS = [("op0", "240-01", "Telia"), ("op1", "240-02", "Tre"), ("op2", "240-07", "Tele2")]
#: Threads sending heartbeats back to back (a 2-core machine's worth of load generator).
SENDERS = 4
SCRAPES = 3

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with orchestrator(tmp_path_factory.mktemp("scrape-load"),
                      TESTBED_METRICS_TOKEN=SCRAPE) as server:
        yield server


def _figures(i: int) -> dict[str, object]:
    """What node ``i`` reports in every heartbeat: its own figures, to find in its
    series."""
    return {"clock_offset_s": (i - NODES / 2) / 1000, "disk_free_bytes": 10**9 + i,
            "spooled_bundles": i % 4}


def _register(live: Live, http: httpx.Client, i: int) -> str:
    token = live.add_node(f"se-{i:03d}")
    reg = wire.Registration(agent_version="test", interfaces=[
        wire.InterfaceReport(name=n, operator=wire.Operator(mcc_mnc=m, name=o))
        for n, m, o in SIMS])
    r = http.post(f"{live.url}{wire.AGENT_PREFIX}/register",
                  headers={"Authorization": f"Bearer {token}"},
                  json=reg.model_dump(mode="json"))
    assert r.status_code == 200, r.text
    return token


def _beat(http: httpx.Client, live: Live, token: str, i: int) -> None:
    hb = wire.Heartbeat.model_validate({"sent_at": datetime.now(UTC), "interfaces": [],
                                        **_figures(i)})
    r = http.post(f"{live.url}{wire.AGENT_PREFIX}/heartbeat",
                  headers={"Authorization": f"Bearer {token}"},
                  json=hb.model_dump(mode="json"))
    assert r.status_code == 200, r.text


def _scrape(http: httpx.Client, live: Live) -> Samples:
    r = http.get(f"{live.url}/metrics", headers={"Authorization": f"Bearer {SCRAPE}"})
    assert r.status_code == 200, r.text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def test_scrapes_during_heartbeats_show_every_series_with_the_databases_values(
        live: Live) -> None:
    with httpx.Client(timeout=60) as http:
        tokens = [_register(live, http, i) for i in range(NODES)]
        for i, token in enumerate(tokens):
            _beat(http, live, token, i)
        for i in range(0, NODES, 3):  # some SIMs hold a reservation
            r = http.post(f"{live.url}/api/v1/runs", headers=live.admin, json={
                "experiment": "tat", "node": f"se-{i:03d}", "interface": f"op{i % 3}",
                "parameters": {}})
            assert r.status_code == 201, r.text

    stop = threading.Event()
    sent = [0] * SENDERS
    failures: list[BaseException] = []

    def send(k: int) -> None:
        try:
            with httpx.Client(timeout=60) as http:
                while not stop.is_set():
                    for i in range(k, NODES, SENDERS):
                        _beat(http, live, tokens[i], i)
                        sent[k] += 1
        except BaseException as e:  # reported by the test below
            failures.append(e)

    senders = [threading.Thread(target=send, args=(k,)) for k in range(SENDERS)]
    for t in senders:
        t.start()
    try:
        with httpx.Client(timeout=60) as http:
            while sum(sent) < NODES:  # the load is on: every node has beaten again
                stop.wait(0.05)
            before = sum(sent)
            scrapes = [_scrape(http, live) for _ in range(SCRAPES)]
            assert sum(sent) > before, "no heartbeat was answered during the scrapes"
            listing = http.get(f"{live.url}/api/v1/quotas", headers=live.admin)
            assert listing.status_code == 200, listing.text
    finally:
        stop.set()
        for t in senders:
            t.join()
    assert not failures, failures

    sims = {(q["node"], q["interface"]): q for q in listing.json()["sims"]}
    assert len(sims) == NODES * len(SIMS)
    assert sum(q["reserved"] for q in sims.values()) > 0
    for samples in scrapes:
        for i in range(NODES):
            node = f"se-{i:03d}"
            figures = _figures(i)
            assert samples[("testbed_node_health", frozenset(
                {"node": node, "health": "online"}.items()))] == 1
            one = frozenset({"node": node}.items())
            assert samples[("testbed_node_clock_offset_seconds", one)] == figures[
                "clock_offset_s"]
            assert samples[("testbed_node_disk_free_bytes", one)] == figures[
                "disk_free_bytes"]
            assert samples[("testbed_node_spooled_bundles", one)] == figures[
                "spooled_bundles"]
            assert 0 <= samples[("testbed_node_heartbeat_age_seconds", one)] < 60
        for (node, iface), q in sims.items():
            labels = frozenset({"node": node, "interface": iface,
                                "mcc_mnc": q["mcc_mnc"]}.items())
            for key in ("used", "reserved", "limit", "overrun"):
                assert samples[(f"testbed_quota_{key}_bytes", labels)] == q[key], (
                    node, iface, key)
        per_node = sum(1 for name, _ in samples if name.startswith("testbed_node_"))
        per_sim = sum(1 for name, _ in samples if name.startswith("testbed_quota_"))
        assert (per_node, per_sim) == (5 * NODES, 4 * NODES * len(SIMS))
        assert samples[("testbed_nodes", frozenset({"health": "online"}.items()))] == NODES
