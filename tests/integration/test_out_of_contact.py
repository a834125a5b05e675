"""Out of contact is not failure (issue 10): a run whose node falls silent is
``unreachable``, keeps its reservation, and ends ``done`` when the node comes back with
its bundle, charged the bytes it measured, with a note of the silence; only a silence
past the horizon fails it. Real app, real database, a manual clock."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from orchestrator.services.reaper import reap
from testbed_common import wire
from testbed_common.bundle import build_bundle
from tests.integration.conftest import Api
from tests.integration.test_campaign_planner import TAT10
from tests.integration.test_quota_settlement import report, shown, sim_quota, started_run

BUNDLE_URL = "/api/v1/agent/runs/{}/bundle"
MEASURED = 20_000_000  # under the 32 MB reserved for a 10 s tat


def _reap(api: Api) -> int:
    return reap(api.client.app.state.ctx)  # type: ignore[attr-defined]


def _silence(api: Api) -> None:
    """Let the node miss enough heartbeats to be offline, then run the reaper."""
    hb = api.settings.health
    api.clock.advance(hb.heartbeat_interval_s * hb.offline_after_beats + 1)
    assert _reap(api) == 1


def _upload(api: Api, token: str, run_id: str, tmp: Path, *,
            bytes_used: int = MEASURED) -> Any:
    root = tmp / run_id
    (root / "results").mkdir(parents=True)
    (root / "meta").mkdir()
    (root / "results" / "tat.json").write_text(json.dumps({"format": "testbed.tat"}))
    (root / "meta" / "run.json").write_text(json.dumps({
        "format": "testbed.run-meta", "version": 1, "bytes_used": bytes_used,
        "started_at": api.clock.now().isoformat()}))
    data = build_bundle(root, run_id=run_id, node_id="se-01")
    url = BUNDLE_URL.format(run_id)
    r = api.client.post(url, headers=api.node(token),
                        json={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    assert r.status_code in (200, 201), r.text
    r = api.client.patch(url, content=data, headers={
        **api.node(token), wire.UPLOAD_OFFSET_HEADER: "0",
        "Content-Type": "application/offset+octet-stream"})
    assert r.status_code in (200, 204), r.text
    return r.json()


def test_a_silent_nodes_run_is_unreachable_not_failed_and_keeps_its_reservation(
        api: Api) -> None:
    _, run = started_run(api)
    _silence(api)
    got = shown(api, run["id"])
    assert got["state"] == "unreachable"
    assert "se-01 fell silent" in got["reason"] and "7 days" in got["reason"]
    assert got["charged_bytes"] is None
    q = sim_quota(api)
    assert (q["used"], q["reserved"]) == (0, TAT10)  # the reservation is kept
    listed = api.client.get("/api/v1/runs", params={"state": "unreachable"},
                            headers=api.admin).json()
    assert [r["id"] for r in listed] == [run["id"]]
    assert 'testbed_runs{state="unreachable"} 1.0' in api.client.get("/metrics").text
    fleet = api.client.get("/pages/fleet", headers=api.admin).text
    row = re.search(r"<tr[^>]*>\s*<td[^>]*>se-01</td>.*?</tr>", fleet, re.S)
    assert "Runs unreachable" in fleet and row is not None
    assert re.findall(r"<td[^>]*>([^<]*)</td>", row.group(0))[-1] == "1", row.group(0)
    assert _reap(api) == 0  # a second pass changes nothing


def test_node_back_reports_and_uploads_and_the_run_is_done_charged_what_it_measured(
        api: Api, tmp_path: Path) -> None:
    token, run = started_run(api)
    _silence(api)  # 601 s after the last heartbeat
    api.clock.advance(99)
    # back: still running, then finished; it reports the bytes it measured, and uploads
    api.heartbeat(token, running=[run["id"]])
    assert shown(api, run["id"])["state"] == "running"
    # Long past its deadline, but back in contact and reporting: the reaper gives it a
    # grace from that report, not from the deadline (it would fail between two of the
    # node's replayed reports otherwise).
    assert _reap(api) == 0 and shown(api, run["id"])["state"] == "running"
    api.clock.advance(5)
    report(api, token, run["id"], "uploading", MEASURED)
    assert _upload(api, token, run["id"], tmp_path)["complete"]
    got = shown(api, run["id"])
    assert got["state"] == "done"
    assert "node se-01 out of contact for 11 min 40 s during the run" in got["reason"]
    assert got["charged_bytes"] == MEASURED
    q = sim_quota(api)
    assert (q["used"], q["reserved"], q["overrun"]) == (MEASURED, 0, 0)


def test_bundle_before_any_report_ends_the_run_done_charged_the_bundles_counters(
        api: Api, tmp_path: Path) -> None:
    token, run = started_run(api)
    _silence(api)
    api.clock.advance(39)  # 640 s of silence in all
    assert _upload(api, token, run["id"], tmp_path, bytes_used=17_000_000)["complete"]
    got = shown(api, run["id"])
    assert got["state"] == "done"
    assert "out of contact for 10 min 40 s" in got["reason"]
    assert (got["measured_bytes"], got["charged_bytes"]) == (17_000_000, 17_000_000)


def test_silence_past_the_horizon_fails_the_run_charged_its_reservation_and_a_late_bundle_is_kept(
        api: Api, tmp_path: Path) -> None:
    token, run = started_run(api)
    _silence(api)
    api.clock.advance(api.settings.health.unreachable_horizon_s - 700)
    assert _reap(api) == 0  # not yet: under 7 days of silence
    assert shown(api, run["id"])["state"] == "unreachable"
    api.clock.advance(100)
    assert _reap(api) == 1
    got = shown(api, run["id"])
    assert got["state"] == "failed"
    assert got["reason"].startswith("no word from node se-01 for 7 days since ")
    assert got["charged_bytes"] == TAT10  # started, never measured: the whole reservation
    # the bundle that arrives after all is archived; the run stays failed
    assert _upload(api, token, run["id"], tmp_path)["complete"]
    late = shown(api, run["id"])
    assert late["state"] == "failed" and late["bundle_sha256"]
    assert late["charged_bytes"] == TAT10  # settled once


def test_a_restarted_agent_is_told_of_its_unreachable_run_and_its_failure_is_final(
        api: Api) -> None:
    token, run = started_run(api)
    _silence(api)
    reg = wire.Registration(agent_version="test", interfaces=[])
    r = api.client.post(f"{wire.AGENT_PREFIX}/register", headers=api.node(token),
                        json=reg.model_dump(mode="json"))
    assert r.json()["active_run_ids"] == [run["id"]]
    restart = "agent restarted during the run; experiment lost"
    assert api.report(token, run["id"], "failed", restart).status_code == 204
    assert (shown(api, run["id"])["state"], shown(api, run["id"])["reason"]) == (
        "failed", restart)
    assert api.report(token, run["id"], "running").status_code == 409  # final stays final
    api.clock.advance(timedelta(days=8).total_seconds())
    assert _reap(api) == 0


def test_a_run_back_from_out_of_contact_that_then_says_nothing_fails_after_a_grace(
        api: Api) -> None:
    token, run = started_run(api)
    _silence(api)
    api.clock.advance(99)
    api.heartbeat(token, running=[run["id"]])  # back, and still running, it says
    assert _reap(api) == 0
    api.clock.advance(api.settings.health.deadline_grace_s + 1)
    api.heartbeat(token, running=[run["id"]])  # heard from, but no end reported
    assert _reap(api) == 1
    got = shown(api, run["id"])
    assert got["state"] == "failed" and "no end reported by the deadline" in got["reason"]
