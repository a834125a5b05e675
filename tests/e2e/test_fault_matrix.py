"""Rows 1, 3, 4, 7, 8 and 10 of the fault matrix (issue 10; docs/reliability.md): a fault
made to the compose fleet for real (a process killed, a container stopped, the control
link cut, the same bundle sent twice), then the runs it touched audited for the five
figures (tests/e2e/audit.py) and the figures recorded for the doc's table.

Each row keeps to short runs (5-10 s of TAT) so the matrix stays a few minutes of CI.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from node_agent.backstop import parse_quota, quota_name
from node_agent.faults import STALL_UPLOAD
from testbed_common import wire
from tests.e2e.audit import audit, record
from tests.e2e.chaos import (
    arm,
    container,
    disarm,
    docker,
    kill,
    node_token,
    partitioned,
    pid1,
    read_bytes,
    sh,
)
from tests.e2e.conftest import FINAL, URL, Fleet, story

pytestmark = pytest.mark.e2e

ORCHESTRATOR = "testbed-orchestrator"
SERVER = "testbed-server"
INFLUXDB = "testbed-influxdb"
SPOOL = "/var/lib/testbed-agent/spool"


def _agent_api(node: str) -> httpx.Client:
    """The agent API as ``node``'s agent sees it (its token), for what only it may ask."""
    return httpx.Client(base_url=URL + wire.AGENT_PREFIX, timeout=30,
                        headers={"Authorization": f"Bearer {node_token(node)}"})


def _held(agent: httpx.Client, run_id: str) -> int | None:
    """Bytes of ``run_id``'s bundle the orchestrator holds; None before it is declared."""
    r = agent.get(f"/runs/{run_id}/bundle")
    if r.status_code == 404:
        return None
    r.raise_for_status()
    offset: int = r.json()["offset"]
    return offset


def _wait_held(agent: httpx.Client, run_id: str, *, at_least: int,
               timeout_s: float = 120) -> int:
    end = time.monotonic() + timeout_s
    while (held := _held(agent, run_id)) is None or held < at_least:
        assert time.monotonic() < end, f"run {run_id}: orchestrator holds {held} bytes"
        time.sleep(0.5)
    return held


def _uploaded_total(fleet: Fleet) -> int:
    """testbed_upload_bytes_total: every bundle byte the orchestrator ever took."""
    text = fleet.http.get("/metrics").text
    found = re.search(r"^testbed_upload_bytes_total (\S+)$", text, re.M)
    assert found, "no testbed_upload_bytes_total in /metrics"
    return int(float(found[1]))


def _agent_log(node: str, since: str) -> str:
    """The agent's log (stdout and stderr) since ``since`` (a Unix time)."""
    logs = subprocess.run(["docker", "logs", "--since", since, container(node)],
                          capture_output=True, text=True, check=True)
    return logs.stdout + logs.stderr


def _no_run_containers(run_id: str, timeout_s: float = 30) -> bool:
    end = time.monotonic() + timeout_s
    while docker("ps", "-q", "--filter", f"label=testbed.run={run_id}").strip():
        if time.monotonic() > end:
            return False
        time.sleep(1)
    return True


# -- row 1 ------------------------------------------------------------------------------


def test_row1_agent_sigkilled_mid_run_restarted_30s_later(fleet: Fleet) -> None:
    """The agent (the node container's PID 1) gets SIGKILL while one run measures and
    the bundle of the run before is half uploaded; the node starts again 30 s later.

    Lost would be: the finished run's bundle, or any run left hanging. The run in flight
    cannot finish (its experiment, its counters and its kernel quota died with the node's
    namespace): it must end failed saying so, charged its reservation (the kernel quota
    held its traffic to that, so the SIM is never charged less than it spent), and the
    node must measure again after."""
    node, name = "se-02", container("se-02")
    fleet.wait_online(node)
    assert "testbed-agent" in pid1(name), pid1(name)  # the kill hits the agent
    arm(node, STALL_UPLOAD, "0.5")  # the first run's bundle stops halfway
    first = fleet.submit(node, "op0", duration_s=10)
    in_flight = fleet.submit(node, "op0", duration_s=60)
    with _agent_api(node) as agent:
        fleet.wait(first, {"uploading"}, timeout_s=90)
        held = _wait_held(agent, first, at_least=1)
        running = fleet.wait(in_flight, {"running"}, timeout_s=90)
        # While it runs, the kernel holds it to its reservation: the agent's nftables
        # quota in the node's namespace, as large as the bytes reserved for the run.
        listing = sh(name, f"nft -j list quota inet testbed_backstop {quota_name(in_flight)}")
        assert parse_quota(listing).limit_bytes == running["forecast_bytes"], listing
        time.sleep(3)  # measuring
        kill(name)
        killed = time.monotonic()
        silent = fleet.wait(in_flight, {"unreachable", *FINAL}, timeout_s=60)
        took = time.monotonic() - killed
        # first out of contact (a node that only lost its link finishes offline), not
        # failed; its reservation kept, not settled
        assert silent["state"] == "unreachable", story(silent)
        assert f"{node} fell silent" in silent["reason"]
        assert silent["charged_bytes"] is None
        assert took < 40, took  # 10 missed 2 s heartbeats, plus one reaper pass
        time.sleep(max(0.0, 30 - (time.monotonic() - killed)))
        down_s = time.monotonic() - killed
        docker("start", name)
        fleet.wait_online(node)
        lost = fleet.wait(in_flight, FINAL, timeout_s=60)
        done = fleet.wait(first, FINAL, timeout_s=120)
    assert lost["state"] == "failed" and "agent restarted during the run" in lost["reason"], \
        story(lost)
    assert lost["charged_bytes"] == lost["reserved_bytes"]  # started, never measured
    assert _no_run_containers(in_flight)  # the new life removed the orphaned experiment
    assert done["state"] == "done", story(done)
    after = fleet.submit(node, "op0", duration_s=5)  # the node measures again
    fleet.wait(after, FINAL, timeout_s=120)
    runs = [first, in_flight, after]
    result = audit(fleet, runs, expected_not_done={
        in_flight: "agent restarted during the run"})
    assert result.problems() == [], result.explain()
    assert fleet.get(f"/api/v1/runs/{in_flight}")["state"] == "failed"  # final stays final
    record(1, "agent SIGKILLed mid-run, restarted 30 s later", result,
           fault=(f"agent (PID 1) SIGKILLed 3 s into a 60 s TAT run, the run before it "
                  f"{held} B into its upload; started again after {down_s:.0f} s; the run "
                  f"in flight failed, charged its {lost['charged_bytes']} B reservation"),
           failed_as_expected=1, charged_unmeasured_bytes=lost["charged_bytes"],
           down_s=round(down_s))


# -- row 3 ------------------------------------------------------------------------------


def test_row3_orchestrator_killed_and_restarted_mid_campaign(fleet: Fleet) -> None:
    """An hourly TAT campaign on two nodes in compressed time (an hour in 30 s); the
    orchestrator gets SIGKILL while the second session measures, and starts again.
    Every run of the campaign ends done, archived once, and the planner books no
    session twice after the restart."""
    for node in ("se-01", "se-02"):
        fleet.wait_online(node)
    anchor = datetime.now(UTC).replace(microsecond=0)
    start = anchor + timedelta(minutes=20)  # 10 s of wall time from now
    spec = {"version": 2, "name": "row3-restart", "nodes": ["se-01", "se-02"],
            "select": "interface:op0",
            "steps": [{"experiment": "tat", "parameters": {"duration_s": 5}}],
            "recurrence": {"kind": "every", "hours": 1, "start": start.isoformat(),
                           "end": (start + timedelta(hours=3)).isoformat()},
            "time_scale": 120, "time_anchor": anchor.isoformat()}
    r = fleet.http.post("/api/v1/campaigns", json=spec)
    assert r.status_code == 201, r.text
    campaign = r.json()
    booked = sorted(run["id"] for run in campaign["runs"])
    assert len(booked) == 6, campaign["runs"]  # 3 sessions x 2 nodes
    sessions = sorted({run["session"] for run in campaign["runs"]})
    second = [run["id"] for run in campaign["runs"] if run["session"] == sessions[1]]
    fleet.wait(second[0], {"running", "uploading", *FINAL}, timeout_s=120)
    kill(ORCHESTRATOR)
    killed = time.monotonic()
    time.sleep(5)  # down while the second session measures and the third comes due
    docker("start", ORCHESTRATOR)
    fleet.get(f"/api/v1/runs/{booked[0]}")  # retried until the API answers again
    down_s = time.monotonic() - killed
    for run_id in booked:
        fleet.wait(run_id, FINAL, timeout_s=240)
    listed = fleet.get("/api/v1/runs", params={"campaign": campaign["id"]})
    assert sorted(run["id"] for run in listed) == booked, listed  # nothing booked twice
    result = audit(fleet, booked)
    assert result.problems() == [], result.explain()
    record(3, "orchestrator restarted mid-campaign", result,
           fault=("orchestrator SIGKILLed while the 2nd of 3 hourly sessions (an hour in "
                  f"30 s, TAT 5 s on 2 nodes) measured; started again 5 s later, the API "
                  f"answering {down_s:.0f} s after the kill"),
           down_s=round(down_s))


# -- row 4 ------------------------------------------------------------------------------


def test_row4_measurement_server_killed_mid_run(fleet: Fleet) -> None:
    """The measurement server gets SIGKILL 3 s into a 10 s run and starts again 5 s
    later. The run in flight lost its far end: it ends failed with the tool's reason
    and is charged what the agent metered; its logs are archived. The next run on the
    same link is done."""
    node = "se-02"
    fleet.wait_online(node)
    hit = fleet.submit(node, "op0", duration_s=10)
    fleet.wait(hit, {"running"}, timeout_s=90)
    time.sleep(3)
    kill(SERVER)
    time.sleep(5)
    docker("start", SERVER)
    ended = fleet.wait(hit, FINAL, timeout_s=120)
    after = fleet.submit(node, "op0", duration_s=5)
    fleet.wait(after, FINAL, timeout_s=120)
    if ended["state"] != "done":
        assert ended["state"] == "failed" and ended["reason"], story(ended)
        assert ended["measured_bytes"] is not None, story(ended)  # the agent metered it
    result = audit(fleet, [hit, after], expected_not_done={hit: ""})
    assert result.problems() == [], result.explain()
    record(4, "measurement server killed mid-run", result,
           fault=("testbed-server SIGKILLed 3 s into a 10 s TAT run, started 5 s later; "
                  f"the run in flight ended {ended['state']}: {ended['reason'][:120]}"),
           failed_as_expected=int(ended["state"] != "done"))


# -- row 7 ------------------------------------------------------------------------------


def test_row7_bundle_upload_cut_halfway_then_resumed(fleet: Fleet) -> None:
    """A bundle is half uploaded (stall-upload hook), then the node's control link is
    cut for real while the agent tries to send the rest, and restored: the upload goes
    on from where the orchestrator's part ends (no byte taken twice) and the run ends
    done, archived once."""
    node, name = "se-01", container("se-01")
    fleet.wait_online(node)
    arm(node, STALL_UPLOAD, "0.5")
    before = _uploaded_total(fleet)
    run_id = fleet.submit(node, "op0", duration_s=10)
    since = f"{time.time():.0f}"
    with _agent_api(node) as agent:
        fleet.wait(run_id, {"uploading"}, timeout_s=90)
        held = _wait_held(agent, run_id, at_least=1)
        with partitioned(name):
            cut = time.monotonic()
            disarm(node, STALL_UPLOAD)  # from here only the cut link stops it
            time.sleep(20)
            assert _held(agent, run_id) == held  # nothing got through the cut
            assert fleet.get(f"/api/v1/runs/{run_id}")["state"] == "uploading"
        cut_s = time.monotonic() - cut
        restored = datetime.now(UTC)
        run = fleet.wait(run_id, FINAL, timeout_s=180)
    assert run["state"] == "done", story(run)
    size = len(fleet.http.get(f"/api/v1/runs/{run_id}/bundle").content)
    assert 0 < held < size
    # every byte of the bundle taken once: the rest was sent from the part's end
    assert _uploaded_total(fleet) - before == size
    log = _agent_log(node, since)
    assert f"upload of run {run_id} stalled at byte {held}" in log
    # the rest arrived once the link was back (the agent's tries in the cut hung on the
    # dead link, then went through: no byte of them was taken before)
    done_at = next(datetime.fromisoformat(e["at"]) for e in run["events"]
                   if e["state"] == "done")
    assert done_at >= restored, (done_at, restored)
    result = audit(fleet, [run_id])
    assert result.problems() == [], result.explain()
    record(7, "bundle upload cut halfway, then resumed", result,
           fault=(f"control link cut for {cut_s:.0f} s with {held} of {size} bundle bytes "
                  "held; resumed from there (bytes taken = bundle size)"),
           cut_s=round(cut_s), held_bytes=held, bundle_bytes=size)


# -- row 8 ------------------------------------------------------------------------------

#: How long InfluxDB is down in row 8. Issue 10 says 5 min; 60 s outlasts everything
#: that could bridge the gap: the client's 4 tries of one write (10 s timeout each,
#: 0.5 + 1 + 2 s apart: under 45 s) and the 2 s ingest pass, so runs are done while
#: every write to the store fails, and only the pending-ingest retry can bring them.
INFLUX_DOWN_S = 60


def test_row8_influxdb_down_while_bundles_arrive(fleet: Fleet) -> None:
    """InfluxDB is stopped; runs on two nodes finish and upload meanwhile (done: the
    archive, not the store, decides); once it starts again every run's points arrive."""
    for node in ("se-01", "se-02"):
        fleet.wait_online(node)
    docker("stop", INFLUXDB)
    stopped = time.monotonic()
    try:
        runs = [fleet.submit("se-01", "op0", duration_s=5),
                fleet.submit("se-02", "op0", duration_s=5)]
        ended = [fleet.wait(run_id, FINAL, timeout_s=INFLUX_DOWN_S - 5) for run_id in runs]
        assert all(run["state"] == "done" for run in ended), [story(r) for r in ended]
        time.sleep(max(0.0, INFLUX_DOWN_S - (time.monotonic() - stopped)))
    finally:
        docker("start", INFLUXDB)
    down_s = time.monotonic() - stopped
    deadline = time.monotonic() + 90
    waiting = set(runs)
    while waiting:
        assert time.monotonic() < deadline, f"no points in InfluxDB for {waiting}"
        time.sleep(2)
        try:
            waiting = {r for r in waiting
                       if not fleet.influx(f"SHOW SERIES WHERE \"run\" = '{r}'")}
        except Exception:  # influxd still starting
            continue
    caught_up_s = time.monotonic() - stopped - down_s
    result = audit(fleet, runs)
    assert result.problems() == [], result.explain()
    record(8, "InfluxDB down while bundles arrive", result,
           fault=(f"testbed-influxdb stopped for {down_s:.0f} s (issue: 5 min; shortened, "
                  "still longer than every write timeout and retry) while 2 runs finished "
                  f"and uploaded; their points arrived {caught_up_s:.0f} s after it "
                  "started"),
           down_s=round(down_s), caught_up_s=round(caught_up_s))


# -- row 10 -----------------------------------------------------------------------------


def _send_all(node: str, run_id: str, data: bytes, start: threading.Barrier,
              replies: list[int]) -> dict[str, Any]:
    """One copy of the agent's upload, over HTTP with the node's token: declare, then
    chunks from wherever the orchestrator says its part ends. Its last status."""
    chunk = max(1, len(data) // 8)
    digest = hashlib.sha256(data).hexdigest()
    with _agent_api(node) as agent:
        start.wait()
        r = agent.post(f"/runs/{run_id}/bundle", json={"size": len(data), "sha256": digest})
        replies.append(r.status_code)
        assert r.status_code in (200, 201), r.text
        status: dict[str, Any] = r.json()
        while not status["complete"]:
            offset = status["offset"]
            r = agent.patch(f"/runs/{run_id}/bundle", content=data[offset:offset + chunk],
                            headers={wire.UPLOAD_OFFSET_HEADER: str(offset),
                                     "Content-Type": "application/offset+octet-stream"})
            replies.append(r.status_code)
            assert r.status_code in (200, 409), r.text
            status = r.json() if r.status_code == 200 else {
                "offset": r.json()["offset"], "complete": False}
    return status


def test_row10_same_bundle_uploaded_twice_at_once(fleet: Fleet) -> None:
    """A run's bundle, held on its node before the first byte (stall-upload at 0), is
    sent by two uploaders at once with the node's token: both are told it is complete
    (or the offset to resume from, 409, on the way); it is archived once and the run is
    done once. The agent, let go after, is told it is complete too."""
    node, name = "se-02", container("se-02")
    fleet.wait_online(node)
    arm(node, STALL_UPLOAD, "0")
    run_id = fleet.submit(node, "op0", duration_s=5)
    with _agent_api(node) as agent:
        fleet.wait(run_id, {"uploading"}, timeout_s=90)
        _wait_held(agent, run_id, at_least=0)  # declared by the agent, nothing sent
    data = read_bytes(name, f"{SPOOL}/{run_id}.tar.gz")
    start = threading.Barrier(2)
    replies: list[int] = []
    with ThreadPoolExecutor(2) as pool:
        senders = [pool.submit(_send_all, node, run_id, data, start, replies)
                   for _ in range(2)]
        statuses = [s.result(timeout=120) for s in senders]
    assert all(s["complete"] for s in statuses), statuses
    disarm(node, STALL_UPLOAD)
    end = time.monotonic() + 90  # the agent's own try: told complete, spool emptied
    while sh(name, f"ls {SPOOL} | grep {run_id} || true").strip():
        assert time.monotonic() < end, "the agent still holds the bundle"
        time.sleep(1)
    run = fleet.get(f"/api/v1/runs/{run_id}")
    assert run["state"] == "done", story(run)
    assert [e["state"] for e in run["events"]].count("done") == 1, story(run)
    assert run["bundle_sha256"] == hashlib.sha256(data).hexdigest()
    result = audit(fleet, [run_id])
    assert result.problems() == [], result.explain()
    record(10, "same bundle uploaded twice at once", result,
           fault=(f"a {len(data)}-byte bundle sent by two uploaders at once with the "
                  f"node's token ({replies.count(409)} chunks told to resume elsewhere, "
                  "409), then by the node's agent: archived once, done once"),
           conflicts=replies.count(409))
