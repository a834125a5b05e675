"""Campaigns through the API with the planner and the quota ledger, on real SQLite and
PostgreSQL: compressed hourly sessions, caps that defer, settlement with measured
bytes, and bad input refused with reasons."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.integration.conftest import Api

# tat at the default 20 Mbit/s: rate/8 * d * 1.2 + 2 MB (experiments/tat/experiment.yaml)
TAT10 = 32_000_000
TAT20 = 62_000_000
SESSION = 2 * (TAT10 + TAT20 + TAT10)  # ABw-TAT-ABw-like, two balanced repetitions
HOUR = 3600


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value)


def hourly(api: Api, hours: int, **extra: Any) -> dict[str, Any]:
    """An ABw-TAT-ABw-like session (tat three times as stand-ins) every campaign hour,
    campaign time six times faster than wall time (an hour in 10 minutes)."""
    t0 = api.clock.now()
    return {
        "version": 2, "name": "abw-tat-like", "project": "default",
        "select": "country:SE AND operator:240-01",
        "steps": [{"experiment": "tat", "parameters": {"duration_s": d}} for d in (10, 20, 10)],
        "repetitions": 2, "pause_s": 300,
        "recurrence": {"kind": "every", "hours": 1, "start": t0.isoformat(),
                       "end": (t0 + timedelta(hours=hours)).isoformat()},
        "time_scale": 6, "time_anchor": t0.isoformat(),
        **extra,
    }


def two_nodes(api: Api) -> dict[str, str]:
    return {n: api.add_node(n, [("op0", "240-01", "Telia"), ("op1", "240-02", "Tele2")])
            for n in ("se-01", "se-02")}


def submit(api: Api, spec: dict[str, Any], status: int = 201) -> dict[str, Any]:
    r = api.client.post("/api/v1/campaigns", headers=api.admin, json=spec)
    assert r.status_code == status, r.text
    out: dict[str, Any] = r.json()
    return out


def set_cap(api: Api, node: str, iface: str, cap: int, status: int = 200) -> dict[str, Any]:
    r = api.client.put(f"/api/v1/nodes/{node}/interfaces/{iface}/quota", headers=api.admin,
                       json={"cap_bytes": cap, "reset_day": 1, "margin": 0.05})
    assert r.status_code == status, r.text
    out: dict[str, Any] = r.json()
    return out


def quota(api: Api, node: str, iface: str) -> dict[str, Any]:
    r = api.client.get(f"/api/v1/nodes/{node}/interfaces/{iface}/quota", headers=api.admin)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def replan(api: Api) -> dict[str, Any]:
    r = api.client.post("/api/v1/plan", headers=api.admin)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def sessions(runs: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        by[(r["node"], r["session"])].append(r)
    return {k: sorted(v, key=lambda r: r["not_before"]) for k, v in by.items()}


def cli(api: Api, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    """The real CLI against the app under test; must succeed."""
    out = api.cli(monkeypatch, *args)
    assert out.exit_code == 0, out.output
    return out.output


def test_compressed_hourly_campaign_books_every_window_on_both_nodes(api: Api) -> None:
    two_nodes(api)
    t0 = api.clock.now()
    out = submit(api, hourly(api, hours=6))
    runs = out["runs"]
    assert out["decisions"] == []
    by_session = sessions(runs)
    assert len(by_session) == 2 * 6  # both nodes, six windows, only the 240-01 SIM
    assert {r["interface"] for r in runs} == {"op0"}
    window = timedelta(hours=1) / 6  # one campaign hour in wall time
    for (node, occurrence), rs in by_session.items():
        k = (ts(occurrence) - t0) // timedelta(hours=1)
        start, end = t0 + k * window, t0 + (k + 1) * window
        assert start <= ts(rs[0]["not_before"]) and ts(rs[-1]["deadline"]) <= end, (node, k)
        # ABW1-TAT-ABW2, pause, ABW2-TAT-ABW1: order balanced across repetitions
        assert [r["parameters"]["duration_s"] for r in rs] == [10, 20, 10, 10, 20, 10]
        assert [r["reserved_bytes"] for r in rs] == [TAT10, TAT20, TAT10] * 2
        assert ts(rs[3]["not_before"]) - ts(rs[2]["deadline"]) >= timedelta(seconds=300)
        for a, b in pairwise(rs):
            assert ts(a["deadline"]) <= ts(b["not_before"])  # one run at a time per node
    # reservations are in the ledger at once
    assert quota(api, "se-01", "op0")["reserved"] == 6 * SESSION
    assert quota(api, "se-01", "op1")["reserved"] == 0
    # re-planning books nothing twice
    assert replan(api)["runs_booked"] == 0


def test_v1_demo_campaign_still_books_every_sim_as_soon_as_possible(api: Api) -> None:
    api.add_node("se-01", [("op0", "240-01", "Telia"), ("op1", "240-07", "Tele2")])
    api.add_node("se-02", [("op0", "240-01", "Telia")])
    spec = yaml.safe_load((REPO / "deploy/campaigns/demo.yaml").read_text())
    out = submit(api, spec)
    runs = out["runs"]
    assert len(runs) == 3 * 2  # every SIM: a tat run and an abw-tat session
    assert {(r["node"], r["interface"]) for r in runs} == {
        ("se-01", "op0"), ("se-01", "op1"), ("se-02", "op0")}
    assert sorted(r["experiment"] for r in runs) == ["abw-tat"] * 3 + ["tat"] * 3
    now = api.clock.now()
    assert min(ts(r["not_before"]) for r in runs) - now < timedelta(seconds=10)
    assert all(r["state"] == "scheduled" and r["reserved_bytes"] for r in runs)
    assert replan(api)["runs_booked"] == 0
    # an ad-hoc run still books, after the campaign's runs on that SIM's node
    adhoc = api.submit("se-02", duration_s=5)
    assert ts(adhoc["not_before"]) >= max(ts(r["deadline"]) for r in runs if r["node"] == "se-02")


def test_tight_cap_defers_sessions_with_reason_in_api_and_cli(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    two_nodes(api)
    set_cap(api, "se-01", "op0", 1_000_000_000)  # 950 MB usable: three sessions of 252 MB
    out = submit(api, hourly(api, hours=6))
    per_node = defaultdict(set)
    for node, occurrence in sessions(out["runs"]):
        per_node[node].add(occurrence)
    assert len(per_node["se-01"]) == 3 and len(per_node["se-02"]) == 6
    [d] = out["decisions"]
    assert (d["kind"], d["code"], d["node"], d["interface"], d["count"]) == (
        "deferred", "sim_cap", "se-01", "op0", 3)
    assert "SIM 240-01 on se-01/op0 would reach 101% of its monthly cap" in d["message"]
    q = quota(api, "se-01", "op0")
    assert (q["source"], q["limit"], q["reserved"]) == ("configured", 10**9, 3 * SESSION)
    assert q["remaining"] == 950_000_000 - 3 * SESSION
    metrics = api.client.get("/metrics", headers=api.admin).text  # per SIM: token
    sim = 'interface="op0",mcc_mnc="240-01",node="se-01"'
    assert f"testbed_quota_limit_bytes{{{sim}}} 1e+09" in metrics
    assert f"testbed_quota_reserved_bytes{{{sim}}} 7.56e+08" in metrics
    shown = cli(api, monkeypatch, "campaign", "show", out["id"])
    assert "deferred (sim_cap)" in shown and "se-01/op0" in shown
    [summary] = api.client.get("/api/v1/campaigns", headers=api.admin).json()
    assert summary["id"] == out["id"] and summary["runs"] == {"scheduled": 9 * 2 * 3}
    assert summary["decisions"] == out["decisions"]
    listed_campaigns = cli(api, monkeypatch, "campaign", "list")
    assert f"{out['id']} (abw-tat-like), project default: 54 scheduled" in listed_campaigns
    assert "deferred (sim_cap) se-01/op0, 3 session(s): deferred: SIM 240-01" in listed_campaigns
    page = api.client.get("/pages/campaigns", headers=api.admin)
    assert page.status_code == 200
    assert "would reach 101% of its monthly cap" in page.text and "sim_cap" in page.text
    listed = cli(api, monkeypatch, "quota", "list")
    assert "se-01" in listed and "756.00 MB" in listed
    # raising the cap books the deferred sessions on the next plan
    set_cap(api, "se-01", "op0", 2_000_000_000)
    assert replan(api)["runs_booked"] == 3 * 6
    assert api.client.get(f"/api/v1/campaigns/{out['id']}",
                          headers=api.admin).json()["decisions"] == []


def test_cli_sets_quota_with_units(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    api.add_node("se-01", [("op0", "240-01", "Telia")])
    cli(api, monkeypatch, "quota", "set", "se-01", "op0", "--cap", "2GB", "--reset-day", "15")
    q = quota(api, "se-01", "op0")
    assert (q["limit"], q["reset_day"], q["source"]) == (2 * 10**9, 15, "configured")


def test_settled_overrun_is_recorded_and_later_bookings_see_less(api: Api) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    set_cap(api, "se-01", "op0", 200_000_000)  # 190 MB usable
    run = api.submit("se-01", duration_s=10)
    assert run["reserved_bytes"] == TAT10 and run["mcc_mnc"] == "240-01"
    api.heartbeat(token)
    for state in ("deploying", "running"):
        assert api.report(token, run["id"], state).status_code == 204
    r = api.client.post(f"/api/v1/agent/runs/{run['id']}/state", headers=api.node(token), json={
        "state": "uploading", "reason": "finished", "at": api.clock.now().isoformat(),
        "measured_bytes": 100_000_000})
    assert r.status_code == 204, r.text
    shown = api.client.get(f"/api/v1/runs/{run['id']}", headers=api.admin).json()
    assert (shown["measured_bytes"], shown["charged_bytes"]) == (100_000_000, 100_000_000)
    assert any("quota overrun" in e["reason"] for e in shown["events"])
    q = quota(api, "se-01", "op0")
    assert (q["used"], q["reserved"], q["overrun"]) == (100_000_000, 0, 100_000_000 - TAT10)
    assert q["remaining"] == 90_000_000
    api.submit("se-01", duration_s=10)
    api.submit("se-01", duration_s=10)  # 164 MB of 190
    r = api.client.post("/api/v1/runs", headers=api.admin, json={
        "experiment": "tat", "node": "se-01", "interface": "op0",
        "parameters": {"duration_s": 10}})
    assert r.status_code == 409
    assert r.json()["code"] == "sim_cap"
    assert "would reach 98% of its monthly cap" in r.json()["detail"]
    # a campaign sees the same ledger: its session is deferred, not booked
    out = submit(api, {"name": "more", "steps": [{"experiment": "tat"}]})
    assert out["runs"] == [] and out["decisions"][0]["code"] == "sim_cap"


def test_run_that_never_started_releases_its_reservation(api: Api) -> None:
    api.add_node("se-01", [("op0", "240-01", "Telia")])
    run = api.submit("se-01", duration_s=10)
    assert quota(api, "se-01", "op0")["reserved"] == TAT10
    r = api.client.post(f"/api/v1/runs/{run['id']}/cancel", headers=api.admin, json={})
    assert r.status_code == 200 and r.json()["charged_bytes"] == 0
    q = quota(api, "se-01", "op0")
    assert (q["used"], q["reserved"]) == (0, 0)


def test_sim_without_cap_is_not_booked_and_says_why(api: Api, tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from orchestrator.api.app import create_app
    from orchestrator.settings import SchedulingSettings

    settings = api.settings.model_copy(update={
        "scheduling": SchedulingSettings(default_sim_cap_bytes=None),
        "database_url": f"sqlite:///{tmp_path / 'nocap.db'}"})
    app = create_app(settings, clock=api.clock, reaper=False)
    with TestClient(app) as client:
        other = Api(client, api.clock, settings)
        other.add_node("se-01", [("op0", "240-01", "Telia")])
        r = client.post("/api/v1/runs", headers=other.admin, json={
            "experiment": "tat", "node": "se-01", "interface": "op0"})
        assert r.status_code == 409 and r.json()["code"] == "no_quota"
        out = submit(other, {"name": "demo", "steps": [{"experiment": "tat"}]})
        assert out["runs"] == []
        assert out["decisions"][0]["code"] == "no_quota"
        assert "has no data cap configured" in out["decisions"][0]["message"]
    app.state.ctx.db.engine.dispose()


def test_bad_campaigns_are_refused_with_reasons_and_book_nothing(api: Api) -> None:
    api.add_node("se-01", [("op0", "240-01", "Telia")], timezone="Europe/Stockholm")
    base = {"version": 2, "name": "bad", "steps": [{"experiment": "tat"}]}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"select": "country:NO"}, "selection 'country:NO' selects no SIM"),
        ({"select": "country:SE AND (operator:240-01"}, "^"),
        ({"recurrence": {"kind": "daily", "window": "02:00-03:00",
                         "first_day": "2027-03-28", "last_day": "2027-03-28"}},
         "never occurs in Europe/Stockholm"),
        ({"recurrence": {"kind": "daily", "window": "25:00-26:00",
                         "first_day": "2027-03-01", "last_day": "2027-03-02"}},
         "expected HH:MM-HH:MM"),
        ({"steps": [{"experiment": "tat", "parameters": {"duration_s": 9999}}]},
         "duration_s"),
        ({"steps": [{"experiment": "nope"}]}, "unknown experiment 'nope'"),
    ]
    for extra, message in cases:
        r = api.client.post("/api/v1/campaigns", headers=api.admin, json={**base, **extra})
        assert r.status_code == 422, (extra, r.text)
        assert message in r.json()["detail"], (extra, r.json()["detail"])
    set_cap(api, "se-01", "op0", 30_000_000)  # below one 10 s run (32 MB)
    r = api.client.post("/api/v1/campaigns", headers=api.admin, json=base)
    assert r.status_code == 422
    assert "one run needs 32.00 MB but the cap allows 28.50 MB" in r.json()["detail"]
    assert api.client.get("/api/v1/runs", headers=api.admin).json() == []


def test_overlapping_campaigns_do_not_double_book_and_say_who_holds_the_node(
        api: Api) -> None:
    two_nodes(api)
    first = submit(api, hourly(api, hours=3))
    second = submit(api, hourly(api, hours=3, name="rival"))
    assert len(first["runs"]) == 2 * 3 * 6
    assert second["runs"] == []
    codes = {(d["node"], d["code"]) for d in second["decisions"]}
    assert codes == {("se-01", "node_busy"), ("se-02", "node_busy")}
    assert all(f"campaign {first['id']}" in d["message"] for d in second["decisions"])
    # a higher priority does not displace held runs either
    third = submit(api, hourly(api, hours=3, name="urgent", priority=100))
    assert third["runs"] == []


def test_failed_session_is_booked_again_while_its_window_allows(api: Api) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    out = submit(api, {"name": "once", "steps": [{"experiment": "tat"}]})
    [run] = out["runs"]
    api.heartbeat(token)
    assert api.report(token, run["id"], "failed", "modem reset").status_code == 204
    assert replan(api)["runs_booked"] == 1  # second attempt
    again = api.client.get("/api/v1/runs", headers=api.admin,
                           params={"state": "scheduled"}).json()
    api.heartbeat(token)
    assert api.report(token, again[0]["id"], "failed", "modem reset").status_code == 204
    assert replan(api)["runs_booked"] == 0  # settings.scheduling.session_attempts = 2
