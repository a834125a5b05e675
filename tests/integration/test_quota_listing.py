"""The fleet's quota listing (``GET /api/v1/quotas``, the fleet page's data plans) and a
heartbeat's remaining bytes, on real SQLite and PostgreSQL: each node's rows are its
own, however many nodes there are (the listing groups quota rows by node once, and a
heartbeat reads only its node's rows)."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import Api
from tests.integration.test_fleet_page import mixed_fleet


def _set(api: Api, node: str, iface: str, cap: int) -> None:
    r = api.client.put(f"/api/v1/nodes/{node}/interfaces/{iface}/quota", headers=api.admin,
                       json={"cap_bytes": cap, "reset_day": 1, "margin": 0.0})
    assert r.status_code == 200, r.text


def _listed(api: Api) -> dict[tuple[str, str], dict[str, Any]]:
    r = api.client.get("/api/v1/quotas", headers=api.admin)
    assert r.status_code == 200, r.text
    return {(q["node"], q["interface"]): q for q in r.json()["sims"]}


def test_a_quota_set_before_its_interface_is_reported_is_listed_under_its_own_node(
        api: Api) -> None:
    a = api.add_node("se-01", [("op0", "240-01", "Telia")])
    api.add_node("se-02", [("op0", "240-02", "Tre")])
    _set(api, "se-01", "op0", 3 * 10**9)
    _set(api, "se-01", "op5", 5 * 10**9)  # no such modem reported yet
    _set(api, "se-02", "op7", 7 * 10**9)
    sims = _listed(api)
    assert set(sims) == {("se-01", "op0"), ("se-01", "op5"), ("se-02", "op0"),
                         ("se-02", "op7")}
    assert (sims[("se-01", "op5")]["source"], sims[("se-01", "op5")]["limit"],
            sims[("se-01", "op5")]["mcc_mnc"]) == ("configured", 5 * 10**9, None)
    assert (sims[("se-02", "op7")]["source"], sims[("se-02", "op7")]["limit"]) == (
        "configured", 7 * 10**9)
    assert sims[("se-02", "op0")]["source"] == "default"
    reply = api.heartbeat(a)
    assert reply.sim_left_bytes == {"op0": 3 * 10**9}


def test_a_budget_set_answers_the_projects_figures_as_the_listing_has_them(
        api: Api) -> None:
    """``PUT .../budget`` sums only its project's runs (not the whole listing of every
    SIM): its answer is still the listing's entry, budget or none, runs or none."""
    mixed_fleet(api)  # runs of the default project: settled, open, of the period before
    r = api.client.post("/api/v1/projects", headers=api.admin, json={"name": "idle"})
    assert r.status_code == 201, r.text
    for project, budget in (("default", 10**13), ("default", None), ("idle", 10**9)):
        r = api.client.put(f"/api/v1/projects/{project}/budget", headers=api.admin,
                           json={"budget_bytes": budget})
        assert r.status_code == 200, r.text
        listing = api.client.get("/api/v1/quotas", headers=api.admin)
        assert listing.status_code == 200, listing.text
        listed = {p["project"]: p for p in listing.json()["projects"]}
        assert r.json() == listed[project]
        assert r.json()["limit"] == budget
    assert listed["default"]["used"] > 7 * 10**12 and listed["default"]["reserved"] > 0
    assert listed["idle"]["remaining"] == 10**9
