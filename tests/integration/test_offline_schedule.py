"""The offline schedule (issue 10: nodes that live on trains), through the API on real
SQLite and PostgreSQL with a manual clock: a day of runs handed out at once and never
reserved twice; an assigned run of a silent node kept ``unreachable`` and done when its
bundle comes, charged what it measured; a run the node says it missed ends with the
node's reason; a cancel learned at the next contact; a run that ran offline after its
cancellation kept."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.settings import SchedulingSettings
from testbed_common import wire
from tests.integration.conftest import TEST_SIM_CAP, Api
from tests.integration.test_campaign_planner import TAT10, quota
from tests.integration.test_out_of_contact import MEASURED, _reap, _upload
from tests.integration.test_quota_settlement import report, shown

HOUR = 3600.0


def _node(api: Api) -> str:
    return api.add_node("se-01", [("op0", "240-01", "Telia")])


def _book(api: Api, in_s: float, duration_s: int = 10) -> dict[str, Any]:
    """An ad-hoc tat run booked ``in_s`` from now."""
    r = api.client.post("/api/v1/runs", headers=api.admin, json={
        "experiment": "tat", "node": "se-01", "interface": "op0",
        "parameters": {"duration_s": duration_s},
        "not_before": (api.clock.now() + timedelta(seconds=in_s)).isoformat()})
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def _beat(api: Api, token: str, *, pending: list[str] | None = None,
          running: list[str] | None = None,
          dropped: list[str] | None = None) -> wire.HeartbeatReply:
    hb = wire.Heartbeat(sent_at=api.clock.now(), interfaces=[], disk_free_bytes=10**9,
                        running_run_ids=running or [], pending_run_ids=pending or [],
                        dropped_run_ids=dropped or [])
    r = api.client.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=api.node(token),
                        json=hb.model_dump(mode="json"))
    assert r.status_code == 200, r.text
    return wire.HeartbeatReply.model_validate(r.json())


def _go_silent_past(api: Api, seconds: float) -> None:
    """The node says nothing for ``seconds``; the reaper runs every 5 s meanwhile."""
    step = 5.0
    for _ in range(int(seconds // step)):
        api.clock.advance(step)
        _reap(api)


def test_a_day_of_runs_is_handed_out_at_once_and_reserved_only_at_booking(api: Api) -> None:
    token = _node(api)
    runs = [_book(api, h * HOUR) for h in (1, 12, 23)]
    later = _book(api, 25 * HOUR)  # beyond the day: not handed out yet
    q = quota(api, "se-01", "op0")
    assert (q["reserved"], q["used"]) == (4 * TAT10, 0)  # reserved once, at booking
    reply = _beat(api, token)
    assert [a.run_id for a in reply.assignments] == [r["id"] for r in runs]
    assert [a.max_bytes for a in reply.assignments] == [TAT10] * 3  # each its reservation
    assert {shown(api, r["id"])["state"] for r in runs} == {"assigned"}
    assert shown(api, later["id"])["state"] == "scheduled"
    # handing out reserves nothing more: the SIM's budget is not handed out twice
    assert quota(api, "se-01", "op0")["reserved"] == 4 * TAT10
    # what is left of the SIM for the node: the usable cap less the run not handed out
    usable = quota(api, "se-01", "op0")["usable"]
    assert reply.sim_left_bytes == {"op0": usable - TAT10}
    # the node says it holds them: they are not sent again; a node that lost its book
    # (no pending ids) gets them all again
    assert _beat(api, token, pending=[r["id"] for r in runs]).assignments == []
    assert [a.run_id for a in _beat(api, token).assignments] == [r["id"] for r in runs]
    api.clock.advance(2 * HOUR)  # the 25 h run is now within the day
    assert [a.run_id for a in _beat(api, token, pending=[r["id"] for r in runs]).assignments
            ] == [later["id"]]
    assert shown(api, later["id"])["state"] == "assigned"
    assert quota(api, "se-01", "op0")["reserved"] == 4 * TAT10


def test_a_reply_hands_out_at_most_its_bound_earliest_first(
        tmp_path: Path, clock: Any, database_url: str) -> None:
    from fastapi.testclient import TestClient

    from orchestrator.api.app import create_app
    from tests.integration.conftest import make_settings

    settings = make_settings(tmp_path, scheduling=SchedulingSettings(
        default_sim_cap_bytes=TEST_SIM_CAP, handout_max_runs=2)).model_copy(
        update={"database_url": database_url})
    app = create_app(settings, clock=clock, reaper=False)
    with TestClient(app) as client:
        api = Api(client, clock, settings)
        token = _node(api)
        runs = [_book(api, h * HOUR) for h in (3, 1, 2)]
        reply = _beat(api, token)
        assert [a.run_id for a in reply.assignments] == [runs[1]["id"], runs[2]["id"]]
        assert shown(api, runs[0]["id"])["state"] == "scheduled"
        held = [a.run_id for a in reply.assignments]
        assert [a.run_id for a in _beat(api, token, pending=held).assignments] == []
    app.state.ctx.db.engine.dispose()


def test_the_hand_out_cannot_reach_past_what_the_planner_books() -> None:
    with pytest.raises(ValidationError, match="HANDOUT_HORIZON_S"):
        SchedulingSettings(horizon_s=HOUR, handout_horizon_s=2 * HOUR)
    assert SchedulingSettings().handout_horizon_s == SchedulingSettings().horizon_s == 86400


def test_an_assigned_run_of_a_silent_node_is_unreachable_then_done_on_its_bundle(
        api: Api, tmp_path: Path) -> None:
    token = _node(api)
    run = _book(api, 30 * 60)  # due in 30 min
    _beat(api, token)
    hb = api.settings.health
    # silent: offline after 10 min, but the run is not due yet: it waits, assigned
    _go_silent_past(api, hb.heartbeat_interval_s * hb.offline_after_beats + 60)
    assert shown(api, run["id"])["state"] == "assigned"
    _go_silent_past(api, 20 * 60)  # it fell due meanwhile
    got = shown(api, run["id"])
    assert got["state"] == "unreachable", got
    assert "se-01 was out of contact when the run fell due" in got["reason"]
    assert "may run it offline" in got["reason"] and "7 days" in got["reason"]
    q = quota(api, "se-01", "op0")
    assert (q["reserved"], q["used"]) == (TAT10, 0)  # the reservation is kept
    _go_silent_past(api, HOUR)
    assert shown(api, run["id"])["state"] == "unreachable"  # not failed by its deadline
    # back: its reports (queued offline, in order), then its bundle
    _beat(api, token)
    for state in ("deploying", "running"):
        assert api.report(token, run["id"], state).status_code == 204
    report(api, token, run["id"], "uploading", MEASURED)
    assert _upload(api, token, run["id"], tmp_path)["complete"]
    got = shown(api, run["id"])
    assert got["state"] == "done", got
    assert (got["measured_bytes"], got["charged_bytes"]) == (MEASURED, MEASURED)
    q = quota(api, "se-01", "op0")
    assert (q["reserved"], q["used"], q["overrun"]) == (0, MEASURED, 0)


def test_a_bundle_alone_ends_an_offline_run_done_charged_its_counters(
        api: Api, tmp_path: Path) -> None:
    token = _node(api)
    run = _book(api, 60)
    _beat(api, token)
    _go_silent_past(api, 15 * 60)
    assert shown(api, run["id"])["state"] == "unreachable"
    assert _upload(api, token, run["id"], tmp_path, bytes_used=17_000_000)["complete"]
    got = shown(api, run["id"])
    assert got["state"] == "done"
    assert (got["measured_bytes"], got["charged_bytes"]) == (17_000_000, 17_000_000)


def test_a_run_the_node_missed_offline_ends_with_its_reason_and_releases_its_reservation(
        api: Api) -> None:
    token = _node(api)
    run = _book(api, 60)
    _beat(api, token)
    _go_silent_past(api, 15 * 60)
    assert shown(api, run["id"])["state"] == "unreachable"
    missed = "missed: the node could not start the run before its deadline (...)"
    assert api.report(token, run["id"], "expired", missed).status_code == 204
    got = shown(api, run["id"])
    assert (got["state"], got["reason"]) == ("expired", missed)
    assert got["charged_bytes"] == 0  # it never ran: nothing charged
    assert quota(api, "se-01", "op0")["reserved"] == 0
    assert api.report(token, run["id"], "running").status_code == 409  # final stays final


def test_a_node_that_refuses_a_run_offline_is_charged_nothing_for_it(api: Api) -> None:
    token = _node(api)
    run = _book(api, 60)
    _beat(api, token)
    _go_silent_past(api, 15 * 60)
    why = "refused by the node: run reserves more than its SIM has left"
    assert api.report(token, run["id"], "failed", why).status_code == 204
    got = shown(api, run["id"])
    assert (got["state"], got["reason"], got["charged_bytes"]) == ("failed", why, 0)


def test_silence_past_the_horizon_fails_an_unreachable_assigned_run_charging_it(
        api: Api) -> None:
    token = _node(api)
    run = _book(api, 60)
    _beat(api, token)
    _go_silent_past(api, 15 * 60)
    api.clock.advance(api.settings.health.unreachable_horizon_s)
    _reap(api)
    got = shown(api, run["id"])
    assert got["state"] == "failed"
    assert got["reason"].startswith("no word from node se-01 for 7 days")
    assert got["charged_bytes"] == TAT10  # it may have run unseen: the safe side


def test_a_cancel_made_while_the_node_was_offline_is_learned_at_its_next_contact(
        api: Api) -> None:
    token = _node(api)
    kept, cancelled = _book(api, 2 * HOUR), _book(api, 3 * HOUR)
    held = [a.run_id for a in _beat(api, token).assignments]
    assert held == [kept["id"], cancelled["id"]]
    _go_silent_past(api, 15 * 60)  # offline
    r = api.client.post(f"/api/v1/runs/{cancelled['id']}/cancel", headers=api.admin,
                        json={"reason": "campaign withdrawn"})
    assert r.status_code == 200, r.text
    assert r.json()["charged_bytes"] is None  # held: the node may run it, not knowing
    reply = _beat(api, token, pending=held)
    assert reply.cancel_run_ids == [cancelled["id"]]
    assert reply.assignments == []  # the other is held already
    assert shown(api, kept["id"])["state"] == "assigned"
    reply = _beat(api, token, pending=[kept["id"]], dropped=[cancelled["id"]])
    assert reply.cancel_run_ids == []
    assert shown(api, cancelled["id"])["charged_bytes"] == 0  # dropped: released


def test_a_campaign_cancelled_while_its_node_was_offline_is_dropped_from_its_book(
        api: Api) -> None:
    token = _node(api)
    t0 = api.clock.now() + timedelta(minutes=5)
    r = api.client.post("/api/v1/campaigns", headers=api.admin, json={
        "version": 2, "name": "on-a-train", "project": "default", "nodes": ["se-01"],
        "select": "interface:op0",
        "steps": [{"experiment": "tat", "parameters": {"duration_s": 10}}],
        "recurrence": {"kind": "every", "hours": 1, "start": t0.isoformat(),
                       "end": (t0 + timedelta(hours=3)).isoformat()}})
    assert r.status_code == 201, r.text
    campaign = r.json()
    ids = sorted(run["id"] for run in campaign["runs"])
    assert len(ids) == 3
    held = [a.run_id for a in _beat(api, token).assignments]
    assert sorted(held) == ids  # the whole campaign is on the node
    _go_silent_past(api, 15 * 60)  # the first falls due while it is offline
    states = {i: shown(api, i)["state"] for i in ids}
    assert sorted(states.values()) == ["assigned", "assigned", "unreachable"], states
    r = api.client.post(f"/api/v1/campaigns/{campaign['id']}/cancel", headers=api.admin)
    assert r.status_code == 200, r.text
    assert {shown(api, i)["state"] for i in ids} == {"cancelled"}  # none had started
    assert quota(api, "se-01", "op0")["reserved"] == 3 * TAT10  # held for the node's word
    # back: the node still holds two (it missed the first: reported on its own)
    reply = _beat(api, token, pending=held[1:])
    assert reply.cancel_run_ids == sorted(held[1:])
    assert reply.assignments == []
    # it dropped the two, and missed the first: none ran, all released
    _beat(api, token, dropped=held)
    assert quota(api, "se-01", "op0")["reserved"] == 0
    assert {shown(api, i)["charged_bytes"] for i in ids} == {0}


def test_a_run_that_ran_offline_after_its_cancellation_is_kept_and_done(
        api: Api, tmp_path: Path) -> None:
    token = _node(api)
    run = _book(api, 20 * 60)
    _beat(api, token)
    _go_silent_past(api, 12 * 60)  # offline, the run not due yet
    r = api.client.post(f"/api/v1/runs/{run['id']}/cancel", headers=api.admin,
                        json={"reason": "campaign withdrawn"})
    assert r.status_code == 200, r.text
    cancelled_at = shown(api, run["id"])["state_at"]
    assert quota(api, "se-01", "op0")["reserved"] == TAT10  # held: the node may run it
    _go_silent_past(api, 15 * 60)  # the node ran it meanwhile, not knowing
    # back: its reports are refused (the run is final here) ...
    assert api.report(token, run["id"], "deploying").status_code == 409
    # ... but its bundle is real results: archived, and the run is done, saying so
    assert _upload(api, token, run["id"], tmp_path, bytes_used=MEASURED)["complete"]
    got = shown(api, run["id"])
    assert got["state"] == "done", got
    # the node's meta/run.json says when it started (the test bundle: at upload time)
    assert f"ran offline at {api.clock.now().isoformat()} on node se-01" in got["reason"]
    assert f"after the cancellation at {cancelled_at[:19]}" in got["reason"]
    assert [e["state"] for e in got["events"]][-2:] == ["cancelled", "done"]
    assert (got["measured_bytes"], got["charged_bytes"]) == (MEASURED, MEASURED)
    q = quota(api, "se-01", "op0")
    assert (q["used"], q["reserved"]) == (MEASURED, 0)  # settled again, at what it moved
    bundle = api.client.get(f"/api/v1/runs/{run['id']}/bundle", headers=api.admin)
    assert bundle.status_code == 200 and bundle.content


def test_a_bundle_for_a_run_cancelled_before_it_was_handed_out_is_still_refused(
        api: Api, tmp_path: Path) -> None:
    token = _node(api)
    run = _book(api, 2 * HOUR)
    r = api.client.post(f"/api/v1/runs/{run['id']}/cancel", headers=api.admin, json={})
    assert r.status_code == 200, r.text
    with pytest.raises(AssertionError, match="never started"):
        _upload(api, token, run["id"], tmp_path)


def test_a_node_that_lost_its_book_is_handed_its_day_again_not_told_it_lost_runs(
        api: Api) -> None:
    token = _node(api)
    runs = [_book(api, h * HOUR) for h in (1, 5)]
    _beat(api, token)
    reg = wire.Registration(agent_version="test", interfaces=[])
    r = api.client.post(f"{wire.AGENT_PREFIX}/register", headers=api.node(token),
                        json=reg.model_dump(mode="json"))
    assert r.json()["active_run_ids"] == []  # nothing it should report lost
    assert [a.run_id for a in _beat(api, token).assignments] == [x["id"] for x in runs]


# --- a cancelled run its node may still run keeps its reservation ----------------------


def _cancel(api: Api, run_id: str) -> dict[str, Any]:
    r = api.client.post(f"/api/v1/runs/{run_id}/cancel", headers=api.admin,
                        json={"reason": "campaign withdrawn"})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def _handed_out_and_cancelled(api: Api, token: str, in_s: float = 20 * 60) -> dict[str, Any]:
    """A run handed to the node, the node then out of contact, the run cancelled."""
    run = _book(api, in_s)
    assert [a.run_id for a in _beat(api, token).assignments] == [run["id"]]
    _go_silent_past(api, 12 * 60)
    return _cancel(api, run["id"])


def test_cancelling_a_handed_out_run_holds_its_reservation_for_the_node(api: Api) -> None:
    token = _node(api)
    got = _handed_out_and_cancelled(api, token)
    assert got["state"] == "cancelled"
    assert got["reason"].startswith("campaign withdrawn (by admin)")
    assert ("reservation stays held until node se-01 confirms it dropped the run"
            in got["reason"]), got["reason"]
    assert got["charged_bytes"] is None  # not settled
    assert quota(api, "se-01", "op0")["reserved"] == TAT10
    # one never handed out is released at once, as before
    later = _book(api, 5 * HOUR)
    assert _cancel(api, later["id"])["charged_bytes"] == 0
    assert quota(api, "se-01", "op0")["reserved"] == TAT10


def test_an_unreachable_run_cancelled_before_it_started_is_held_too(api: Api) -> None:
    token = _node(api)
    run = _book(api, 60)
    _beat(api, token)
    _go_silent_past(api, 15 * 60)  # fell due while the node was away
    assert shown(api, run["id"])["state"] == "unreachable"
    got = _cancel(api, run["id"])
    assert got["charged_bytes"] is None
    assert quota(api, "se-01", "op0")["reserved"] == TAT10


def test_the_nodes_word_that_it_dropped_the_run_releases_it_charged_nothing(
        api: Api) -> None:
    token = _node(api)
    run = _handed_out_and_cancelled(api, token)
    reply = _beat(api, token, pending=[run["id"]])
    assert reply.cancel_run_ids == [run["id"]]
    assert quota(api, "se-01", "op0")["reserved"] == TAT10  # not before it says so
    _beat(api, token, dropped=[run["id"]])
    got = shown(api, run["id"])
    assert (got["state"], got["charged_bytes"]) == ("cancelled", 0)
    assert got["events"][-1]["reason"] == (
        "node se-01 confirmed it dropped the run unstarted after the cancellation: "
        "the reservation is released (charged 0 bytes)")
    assert got["events"][-1]["source"] == "node:se-01"
    q = quota(api, "se-01", "op0")
    assert (q["used"], q["reserved"]) == (0, 0)
    _beat(api, token, dropped=[run["id"]])  # said again (a lost reply): nothing changes
    assert len(shown(api, run["id"])["events"]) == len(got["events"])


def test_a_bundle_instead_settles_at_measured_with_no_overrun_on_a_full_sim(
        api: Api, tmp_path: Path) -> None:
    token = _node(api)
    r = api.client.put("/api/v1/nodes/se-01/interfaces/op0/quota", headers=api.admin,
                       json={"cap_bytes": TAT10, "margin": 0})
    assert r.status_code == 200, r.text
    run = _handed_out_and_cancelled(api, token)
    # the SIM is full: the held bytes cannot be booked again while the node may run it
    r = api.client.post("/api/v1/runs", headers=api.admin, json={
        "experiment": "tat", "node": "se-01", "interface": "op0",
        "parameters": {"duration_s": 10}})
    assert r.status_code == 409, r.text
    _go_silent_past(api, 15 * 60)  # the node ran it meanwhile, not knowing
    assert _upload(api, token, run["id"], tmp_path, bytes_used=MEASURED)["complete"]
    got = shown(api, run["id"])
    assert got["state"] == "done", got
    assert (got["measured_bytes"], got["charged_bytes"]) == (MEASURED, MEASURED)
    q = quota(api, "se-01", "op0")
    assert (q["used"], q["reserved"], q["overrun"]) == (MEASURED, 0, 0)
    assert q["used"] <= q["usable"]  # never over the cap


def test_a_cancelled_run_its_node_never_speaks_of_is_charged_at_the_horizon(
        api: Api) -> None:
    token = _node(api)
    run = _handed_out_and_cancelled(api, token)
    horizon = api.settings.health.unreachable_horizon_s
    api.clock.advance(horizon - 60)
    _reap(api)
    assert shown(api, run["id"])["charged_bytes"] is None  # still waiting for its word
    api.clock.advance(120)
    _reap(api)
    got = shown(api, run["id"])
    assert (got["state"], got["charged_bytes"]) == ("cancelled", TAT10)  # the safe side
    assert got["events"][-1]["reason"].startswith(
        "no word from node se-01 about the cancelled run for 7 days since the cancellation")
    q = quota(api, "se-01", "op0")
    assert (q["used"], q["reserved"]) == (TAT10, 0)


def test_dropped_ids_of_another_nodes_run_or_a_live_run_change_nothing(api: Api) -> None:
    token = _node(api)
    other = api.add_node("se-02", [("op0", "240-02", "Tele2")])
    theirs = _handed_out_and_cancelled(api, token)
    mine = _book(api, 2 * HOUR)
    _beat(api, token, pending=[theirs["id"]])
    assert shown(api, mine["id"])["state"] == "assigned"
    _beat(api, other, dropped=[theirs["id"], mine["id"]])  # not its runs
    _beat(api, token, pending=[mine["id"]], dropped=[mine["id"]])  # not cancelled
    assert shown(api, theirs["id"])["charged_bytes"] is None
    got = shown(api, mine["id"])
    assert (got["state"], got["charged_bytes"]) == ("assigned", None)
    assert quota(api, "se-01", "op0")["reserved"] == 2 * TAT10
