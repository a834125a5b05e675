"""The fleet's quota listing (``GET /api/v1/quotas``, the fleet page's data plans) and a
heartbeat's remaining bytes, on real SQLite and PostgreSQL: each node's rows are its
own, however many nodes there are (the listing groups quota rows by node once, and a
heartbeat reads only its node's rows)."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import Api


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
