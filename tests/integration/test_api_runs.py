"""The run lifecycle through the HTTP API on a real SQLite database."""

from __future__ import annotations

import pytest

from orchestrator.api.app import create_app
from orchestrator.catalogue.manifest import parse_manifest
from orchestrator.services.reaper import reap
from tests.conftest import REPO
from tests.integration.conftest import Api


def test_run_goes_from_booking_to_assignment_with_events(api: Api) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run = api.submit("se-01", duration_s=5)
    assert run["state"] == "scheduled"
    assert run["parameters"] == {"duration_s": 5, "direction": "uplink", "bin_s": 0.1}
    reply = api.heartbeat(token)
    assert [a.run_id for a in reply.assignments] == [run["id"]]
    # What the experiment's manifest asks of the node goes with it (the node confines
    # the run to it, capped by its policy).
    tat = parse_manifest((REPO / "experiments/tat/experiment.yaml").read_text(), source="tat")
    assert reply.assignments[0].resources == tat.resources
    assert reply.assignments[0].capabilities == list(tat.capabilities)
    # the reply is repeated until the node acts on it (a lost reply loses nothing)
    assert [a.run_id for a in api.heartbeat(token).assignments] == [run["id"]]
    for state in ("deploying", "running", "uploading"):
        assert api.report(token, run["id"], state).status_code == 204
    shown = api.client.get(f"/api/v1/runs/{run['id']}", headers=api.admin).json()
    assert shown["state"] == "uploading"
    assert [e["state"] for e in shown["events"]] == [
        "scheduled", "assigned", "deploying", "running", "uploading"]
    assert all(e["reason"] for e in shown["events"])


def test_runs_on_one_node_never_overlap(api: Api) -> None:
    api.add_node("se-01", [("op0", "240-01", "Telia"), ("op1", "240-07", "Tele2")])
    a = api.submit("se-01", "op0", duration_s=10)
    b = api.submit("se-01", "op1", duration_s=10)
    assert b["not_before"] >= a["deadline"]


def test_final_state_is_never_overwritten(api: Api) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run = api.submit("se-01")
    api.heartbeat(token)
    assert api.report(token, run["id"], "failed", "boom").status_code == 204
    late = api.report(token, run["id"], "running")
    assert late.status_code == 409
    assert "failed" in late.json()["detail"]
    shown = api.client.get(f"/api/v1/runs/{run['id']}", headers=api.admin).json()
    assert (shown["state"], shown["reason"]) == ("failed", "boom")


def test_offline_node_makes_its_running_run_unreachable_with_reason(api: Api) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run = api.submit("se-01")
    api.heartbeat(token)
    api.report(token, run["id"], "running")
    hb = api.settings.health
    api.clock.advance(hb.heartbeat_interval_s * hb.offline_after_beats + 1)
    assert reap(api.client.app.state.ctx) == 1  # type: ignore[attr-defined]
    shown = api.client.get(f"/api/v1/runs/{run['id']}", headers=api.admin).json()
    assert shown["state"] == "unreachable"
    assert "fell silent" in shown["reason"]
    node = api.client.get("/api/v1/nodes/se-01", headers=api.admin).json()
    assert node["health"] == "offline"


def test_cancelled_run_is_sent_to_node_as_cancel(api: Api) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run = api.submit("se-01")
    api.heartbeat(token)
    api.report(token, run["id"], "running")
    r = api.client.post(f"/api/v1/runs/{run['id']}/cancel", headers=api.admin, json={})
    assert r.json()["state"] == "cancelled"
    assert api.heartbeat(token, running=[run["id"]]).cancel_run_ids == [run["id"]]


def test_metrics_count_nodes_and_runs(api: Api) -> None:
    api.add_node("se-01", [("op0", "240-01", "Telia")])
    api.submit("se-01")
    text = api.client.get("/metrics").text
    assert 'testbed_nodes{health="online"} 1.0' in text
    assert 'testbed_runs{state="scheduled"} 1.0' in text
    assert "testbed_upload_bytes_total 0.0" in text


def test_openapi_document_lists_agent_and_user_routes(api: Api) -> None:
    paths = api.client.get("/openapi.json").json()["paths"]
    assert "/api/v1/agent/heartbeat" in paths
    assert "/api/v1/runs" in paths


def test_restarted_orchestrator_gives_nodes_time_before_failing_runs(api: Api) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run = api.submit("se-01")
    api.heartbeat(token)
    api.report(token, run["id"], "running")
    hb = api.settings.health
    offline_s = hb.heartbeat_interval_s * hb.offline_after_beats
    api.clock.advance(offline_s * 3)  # the orchestrator was down for a long time
    restarted = create_app(api.settings, clock=api.clock, reaper=False)
    ctx = restarted.state.ctx
    assert reap(ctx) == 0  # the node has not had a chance to heartbeat yet
    api.clock.advance(offline_s + 1)  # and now it has, and stayed silent
    assert reap(ctx) == 1
    ctx.db.engine.dispose()


def test_ad_hoc_runs_reserve_from_the_links_history_as_the_planner_does(api: Api) -> None:
    """Without history the default rate; with three measured rates on the SIM's link,
    their 95th percentile (the planner's policy), per node and operator."""
    from orchestrator.store.tables import Run

    api.add_node("se-01", [("op0", "240-01", "Telia"), ("op1", "240-07", "Tele2")])
    default = api.settings.scheduling.default_rate_bps
    first = api.submit("se-01", "op0", duration_s=10)
    assert first["reserved_bytes"] == int(default / 8 * 10 * 1.2 + 2e6)
    measured = [api.submit("se-01", "op0", duration_s=10)["id"] for _ in range(3)]
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    with ctx.db.session() as s:
        for run_id, rate in zip(measured, (4e6, 5e6, 6e6), strict=True):
            s.get(Run, run_id).measured_rate_bps = rate
    assert api.submit("se-01", "op0", duration_s=10)["reserved_bytes"] == \
        int(6e6 / 8 * 10 * 1.2 + 2e6)
    # the other operator's SIM on the same node has no history of its own
    assert api.submit("se-01", "op1", duration_s=10)["reserved_bytes"] == \
        first["reserved_bytes"]


def test_run_wait_shows_progress_on_stderr_and_the_table_on_stdout(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    """`testbed run wait` against the real app: not a terminal, so plain lines; exit 1
    when a run ends other than done, or when the timeout passes first."""
    api.add_node("se-01", [("op0", "240-01", "Telia"), ("op1", "240-07", "Tele2")])
    gone, waiting = api.submit("se-01", "op0"), api.submit("se-01", "op1")
    api.client.post(f"/api/v1/runs/{gone['id']}/cancel", headers=api.admin,
                    json={"reason": "not needed"})
    out = api.cli(monkeypatch, "run", "wait", gone["id"])
    assert out.exit_code == 1
    assert f"{gone['id']} se-01/op0 tat: cancelled (not needed (by admin)); over" in out.stderr
    assert "1 of 1 runs final; 1 cancelled" in out.stderr
    assert out.stdout.splitlines()[0].split() == [
        "ID", "NODE", "INTERFACE", "EXPERIMENT", "STATE", "NOT_BEFORE", "REASON"]
    assert "\x1b" not in out.output

    out = api.cli(monkeypatch, "run", "wait", "--timeout", "0", gone["id"], waiting["id"])
    assert out.exit_code == 1
    assert f"{waiting['id']} se-01/op1 tat: scheduled" in out.stderr
    assert "gave up after 0 s (--timeout)" in out.stderr
    assert [ln.split()[4] for ln in out.stdout.splitlines()[1:]] == ["cancelled", "scheduled"]
