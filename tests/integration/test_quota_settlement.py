"""Quota settlement through the API, on real SQLite and PostgreSQL: what a run that
finished, failed, overran or was cancelled is charged, and proof that the running path
decides with the ledger's one rule (``orchestrator.quotas.settlement.settle``), the
code the unit tests test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from orchestrator.quotas import settlement
from orchestrator.quotas.ledger import Reservation
from orchestrator.quotas.settlement import ChargeBasis, Settlement
from orchestrator.store.migrate import upgrade
from tests.integration.conftest import Api
from tests.integration.test_campaign_planner import TAT10, quota


def started_run(api: Api) -> tuple[str, dict[str, Any]]:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run = api.submit("se-01", duration_s=10)
    assert run["reserved_bytes"] == TAT10
    api.heartbeat(token)
    for state in ("deploying", "running"):
        assert api.report(token, run["id"], state).status_code == 204
    return token, run


def report(api: Api, token: str, run_id: str, state: str, measured: int | None) -> None:
    body: dict[str, Any] = {"state": state, "reason": "test", "at": api.clock.now().isoformat()}
    if measured is not None:
        body["measured_bytes"] = measured
    r = api.client.post(f"/api/v1/agent/runs/{run_id}/state", headers=api.node(token),
                        json=body)
    assert r.status_code == 204, r.text


def shown(api: Api, run_id: str) -> dict[str, Any]:
    out: dict[str, Any] = api.client.get(f"/api/v1/runs/{run_id}", headers=api.admin).json()
    return out


def sim_quota(api: Api) -> dict[str, Any]:
    return quota(api, "se-01", "op0")


@pytest.fixture
def decided(monkeypatch: pytest.MonkeyPatch) -> list[Settlement]:
    """Every settlement the running orchestrator decides, recorded on its way through
    the ledger's rule (the real one is still called)."""
    seen: list[Settlement] = []
    rule = settlement.settle

    def spy(reservation: Reservation, *, measured_bytes: int | None,
            started: bool) -> Settlement:
        seen.append(rule(reservation, measured_bytes=measured_bytes, started=started))
        return seen[-1]

    monkeypatch.setattr(settlement, "settle", spy)
    return seen


def test_a_finished_run_is_charged_exactly_what_it_measured(
        api: Api, decided: list[Settlement]) -> None:
    token, run = started_run(api)
    report(api, token, run["id"], "uploading", 20_000_000)
    assert shown(api, run["id"])["charged_bytes"] == 20_000_000
    q = sim_quota(api)
    assert (q["used"], q["reserved"], q["overrun"]) == (20_000_000, 0, 0)
    [s] = decided  # settled once, by the rule
    assert (s.charged_bytes, s.released_bytes, s.basis) == (
        20_000_000, TAT10 - 20_000_000, ChargeBasis.MEASURED)
    assert s.reservation.holder == f"run {run['id']}"
    assert not any("overrun" in e["reason"] for e in shown(api, run["id"])["events"])


def test_a_failed_run_is_charged_its_measurement_or_else_its_whole_reservation(
        api: Api, decided: list[Settlement]) -> None:
    token, run = started_run(api)
    report(api, token, run["id"], "failed", None)
    assert shown(api, run["id"])["charged_bytes"] == TAT10
    assert sim_quota(api)["used"] == TAT10
    second = api.submit("se-01", duration_s=10)
    api.heartbeat(token)
    for state in ("deploying", "running"):
        assert api.report(token, second["id"], state).status_code == 204
    report(api, token, second["id"], "failed", 7_000_000)
    assert shown(api, second["id"])["charged_bytes"] == 7_000_000
    assert (sim_quota(api)["used"], sim_quota(api)["reserved"]) == (TAT10 + 7_000_000, 0)
    assert [s.basis for s in decided] == [ChargeBasis.UNMEASURED, ChargeBasis.MEASURED]


def test_an_overrun_is_charged_in_full_recorded_and_explained(
        api: Api, decided: list[Settlement]) -> None:
    token, run = started_run(api)
    report(api, token, run["id"], "uploading", 50_000_000)
    q = sim_quota(api)
    assert (q["used"], q["reserved"], q["overrun"]) == (50_000_000, 0, 50_000_000 - TAT10)
    [s] = decided
    events = [e["reason"] for e in shown(api, run["id"])["events"]]
    assert s.overrun_note() in events
    # reaching a final state later does not settle again
    api.clock.advance(1)
    r = api.client.get("/api/v1/quotas", headers=api.admin)
    assert r.json()["projects"][0]["overrun"] == 50_000_000 - TAT10
    assert len(decided) == 1


def test_a_run_cancelled_before_it_started_releases_everything(
        api: Api, decided: list[Settlement]) -> None:
    api.add_node("se-01", [("op0", "240-01", "Telia")])
    run = api.submit("se-01", duration_s=10)
    r = api.client.post(f"/api/v1/runs/{run['id']}/cancel", headers=api.admin, json={})
    assert r.status_code == 200 and r.json()["charged_bytes"] == 0
    assert [(s.basis, s.released_bytes) for s in decided] == [(ChargeBasis.NOT_STARTED,
                                                               TAT10)]
    q = sim_quota(api)
    assert (q["used"], q["reserved"]) == (0, 0)


def test_migration_0007_keeps_the_overruns_of_runs_settled_before_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0003")
    engine = create_engine(url)
    row = ("INSERT INTO runs (id, project_id, created_by, node_id, interface, experiment, "
           "experiment_version, image, parameters, not_before, deadline, forecast_bytes, "
           "state, state_reason, state_at, created_at, mcc_mnc, reserved_bytes, "
           "reservation_period, charged_bytes, settled_at) VALUES (:id, 1, 1, 'se-01', "
           "'op0', 'tat', 1, 'img', '{}', :t, :t, 10, 'done', 'x', :t, :t, '240-01', 100, "
           ":t, :charged, :settled)")
    t = "2026-11-01 00:00:00"
    with engine.begin() as c:
        for run_id, charged, settled in (("over", 130, t), ("under", 40, t),
                                         ("open", None, None)):
            c.execute(text(row), {"id": run_id, "t": t, "charged": charged, "settled": settled})
    upgrade(url)
    with engine.connect() as c:
        got = {r[0]: r[1] for r in c.execute(text("SELECT id, overrun_bytes FROM runs"))}
    engine.dispose()
    assert got == {"over": 30, "under": 0, "open": None}
