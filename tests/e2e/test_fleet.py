"""The platform end to end through the compose fleet: real containers, real shaped
links, real iperf3, the real agent and orchestrator. (Killed agents and restarted
orchestrators are rows of the fault matrix: test_fault_matrix.py.)"""

from __future__ import annotations

import io
import ipaddress
import json
import subprocess
import tarfile
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.analysis.capture import reference_flows
from orchestrator.analysis.flows import analyse_capture, analyse_flow, tcp_connections
from orchestrator.analysis.packets import Packet
from orchestrator.analysis.pcap import read_capture
from orchestrator.services.dataset_files import verify_release
from tests.conftest import REPO
from tests.e2e.conftest import FINAL, Fleet, SideBySide, story
from tests.release import page_summary, recomputed_summary

pytestmark = pytest.mark.e2e


def pcap_bin_errors(packets: list[Packet], tat: dict[str, Any]) -> list[float]:
    """Relative error of each steady 100 ms bin of the capture's data flow (in-order
    delivered bytes) against the tat result's receiver bins, at the alignment (within
    +-60 ms: the server's interval clock starts with the test, the capture's bin 0 at
    the first data segment) that fits best. The first second (slow start) is left out."""
    flows = [f for f in analyse_capture(packets)
             if f.data_from_client and f.connection.server.port == tat["port"]]
    assert flows, "no data flow to the run's iperf3 port in the capture"
    flow = flows[0]  # most payload first: the data connection
    conn_packets = tcp_connections(packets)[flow.connection]
    ref = [int(b["bytes"]) for b in tat["bins"] if b["duration_s"] > 0.09][10:]
    best: list[float] | None = None
    for offset_ms in range(-60, 61, 2):
        f = analyse_flow(flow.connection, conn_packets,
                         t0_ns=flow.bins_t0_ns + offset_ms * 10**6)
        errs = [abs(b - r) / r for b, r in zip(f.delivered_bins[10:], ref, strict=False)]
        if best is None or sum(e * e for e in errs) < sum(e * e for e in best):
            best = errs
    assert best is not None and len(best) >= 0.8 * len(ref), (best, len(ref))
    return best


@pytest.mark.quiet  # the TAT within 10 % of the link's rate
@pytest.mark.parametrize(("node", "interface", "rate_bps"), [
    ("se-02", "op0", 10e6),  # the one-SIM node on Telia's 10 Mbit/s uplink
    ("se-01", "op1", 4e6),   # the two-SIM node's Tele2 SIM, 4 Mbit/s
])
def test_tat_measures_the_operator_link(
    fleet: Fleet, node: str, interface: str, rate_bps: float
) -> None:
    run_id = fleet.submit(node, interface, duration_s=10)
    run = fleet.wait(run_id, FINAL, timeout_s=180)
    assert run["state"] == "done", story(run)
    states = [e["state"] for e in run["events"]]
    assert states == ["scheduled", "assigned", "deploying", "running", "uploading", "done"]
    result = fleet.get(f"/api/v1/runs/{run_id}/result")
    assert result["format"] == "testbed.tat"
    assert abs(result["mean_bps"] - rate_bps) / rate_bps < 0.10, result["mean_bps"]
    assert len(result["bins"]) >= 90  # 100 ms bins over 10 s, receiver side
    listing = fleet.cli("run", "list", "--node", node)
    assert run_id in listing and "done" in listing
    # the bundle carries the run's packet capture and its modem metadata
    bundle = fleet.http.get(f"/api/v1/runs/{run_id}/bundle")
    assert bundle.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(bundle.content)) as tar:
        names = set(tar.getnames())
        modem = tar.extractfile("meta/modem.jsonl")
        assert modem is not None
        samples = [json.loads(line) for line in modem.read().splitlines() if line.strip()]
        pcap = tar.extractfile(f"results/capture/{interface}.pcap")
        assert pcap is not None
        capture_bytes = pcap.read()
        capture = read_capture(capture_bytes)
        server_pcap = tar.extractfile(f"server/capture/{interface}.pcap")
        server_meta = tar.extractfile("meta/server-capture.json")
        run_meta = tar.extractfile("meta/run.json")
        assert server_pcap is not None and server_meta is not None and run_meta is not None
        server_capture = read_capture(server_pcap.read())
        server_doc = json.loads(server_meta.read())
        node_address = json.loads(run_meta.read())["run_config"]["interface_address"]
    mine = [s for s in samples if s.get("interface") == interface]
    assert mine and all(s.get("cell_id") is not None for s in mine), samples[:2]
    assert "meta/system.jsonl" in names
    # The node's capture, binned by the platform's analysis, agrees with iperf3's
    # receiver bins on the same run (bin by bin, once slow start is over).
    errors = pcap_bin_errors(capture.packets, result)
    assert sum(errors) / len(errors) < 0.05, errors
    # The server's side of the same run (its capture service, fetched by the agent over
    # the control network): the node's data flow, every byte iperf3 received.
    assert server_doc["error"] is None, server_doc
    assert server_doc["server"]["filter"] == f"host {node_address}", server_doc
    server_flows = [f for f in analyse_capture(server_capture.packets)
                    if f.data_from_client and f.connection.server.port == result["port"]]
    assert server_flows, "no data flow to the run's iperf3 port in the server's capture"
    assert str(ipaddress.ip_address(server_flows[0].connection.client.addr)) == node_address
    assert abs(server_flows[0].delivered_bytes - result["bytes"]) / result["bytes"] < 0.02
    assert all(9010 not in (f.connection.server.port, f.connection.client.port)
               for f in analyse_capture(server_capture.packets))  # not the fetch's own
    # Ingest analysed the node's capture inside the orchestrator with the compiled tool
    # (in its image, not the Python fallback): its flows points carry the figures the
    # reference gives on the same bytes.
    subprocess.run(["docker", "exec", "testbed-orchestrator", "testbed-flows", "--help"],
                   check=True, capture_output=True)
    expected = sorted((f.payload_bytes, f.fct_s, f.rtt_3whs_s, f.retrans_pct)
                      for f in reference_flows(capture_bytes).flows)
    query = ("SELECT payload_bytes, fct_s, rtt_3whs_s, retrans_pct FROM flows "
             f"WHERE run = '{run_id}'")
    end = time.monotonic() + 60
    while len(rows := fleet.influx(query)) < len(expected) and time.monotonic() < end:
        time.sleep(1)
    assert sorted((int(r[1]), r[2], r[3], r[4]) for r in rows) == expected, rows


def test_metrics_report_the_fleet(fleet: Fleet) -> None:
    text = fleet.http.get("/metrics").text
    assert 'testbed_nodes{health="online"}' in text
    assert "testbed_upload_bytes_total" in text


def check_session(fleet: Fleet, run_id: str, node: str, *, constant: bool,
                  run_s: float) -> None:
    """A done ABW-TAT-ABW, pause, ABW-TAT-ABW session (one estimate a step, TAT runs of
    ``run_s``): every step moved bytes, ABw within 15% of TAT on a constant-rate link
    (Telenor's diurnal link moves between the steps), at a fraction of TAT's traffic,
    with the ABw tool's latency in the paper's range; its points reach InfluxDB tagged
    with the session."""
    result = fleet.get(f"/api/v1/runs/{run_id}/result")
    assert result["format"] == "testbed.abw-tat" and "error" not in result
    kinds = [s["kind"] for s in result["steps"]]
    assert kinds == ["abw", "tat", "abw", "abw", "tat", "abw"]
    assert all(s["iface_tx_bytes"] > 0 for s in result["steps"])
    summary = result["summary"]
    assert summary["rd"] < 0.15 or not constant, summary
    # TAT moves 8x ABw's bytes with 20 s runs (the paper: 8.5x to 14.7x); its bytes
    # grow with its length and ABw's do not (the demo's 10 s runs: 5.2x at 4 Mbit/s)
    assert summary["volume_ratio_iface"] > 8 * run_s / 20, summary
    yaz = summary["methods"]["yaz"]
    assert 0 < yaz["latency_mean_s"] < 1.5, yaz
    # ingest: the TAT bins and the ABw estimates of this run are in the time-series store
    deadline = time.monotonic() + 60
    while not fleet.influx(f"SELECT count(bps) FROM tat WHERE run = '{run_id}'"):
        assert time.monotonic() < deadline, "run's points never reached InfluxDB"
        time.sleep(2)
    [[_, estimates]] = fleet.influx(
        f"SELECT count(estimate_bps) FROM abw WHERE run = '{run_id}'")
    assert estimates == 4  # 4 ABw steps x 1 estimate
    # the session's points carry its tag, so the ABw-vs-TAT page pairs them (an ad hoc
    # run is its own session; a campaign's is its occurrence on the SIM)
    [[_, session]] = fleet.influx(
        f"SHOW TAG VALUES FROM tat_summary WITH KEY = \"session\" WHERE run = '{run_id}'")
    [[_, tagged]] = fleet.influx("SELECT count(mean_bps) FROM tat_summary WHERE "
                                 f"session = '{session}' AND run = '{run_id}'")
    assert tagged == 2  # the session's two TAT runs
    [[_, paired]] = fleet.influx(
        f"SELECT count(estimate_bps) FROM abw WHERE session = '{session}'")
    assert paired == 4  # and its ABw estimates
    page = fleet.http.get("/pages/abw-tat", params={"node": node})
    assert page.status_code == 200
    assert 'class="point"' in page.text and "No ABw-TAT sessions" not in page.text


#: The demo campaign scripts/up submits (and the README's quick start shows).
DEMO = REPO / "deploy/campaigns/demo.yaml"


@pytest.mark.quiet  # each session: ABw within 15 % of TAT, the estimator's latency under 1.5 s
def test_demo_campaign_and_its_release(fleet: Fleet) -> None:
    """The demo campaign, as scripts/up submits it to a node that came online (each
    step's ``nodes``: scripts/demo-submit.py), on the two-SIM node se-01: a TAT run and
    an ABW-TAT-ABW session on each of its operators (240-01 at 10 Mbit/s, 240-07 at 4),
    one at a time since one run holds a node. Each session is checked as above; then
    the campaign's open-data release is built through the API on the second replica,
    verified by the first and by the CLI, downloaded, and the ABw-TAT figures
    recomputed from its tables alone equal the ABw vs TAT page's for the campaign."""
    fleet.wait_online("se-01")
    spec = yaml.safe_load(DEMO.read_text())
    body = dict(spec, steps=[dict(step, nodes=["se-01"]) for step in spec["steps"]])
    r = fleet.http.post("/api/v1/campaigns", json=body)
    assert r.status_code == 201, r.text
    campaign = r.json()
    runs = campaign["runs"]
    assert sorted((x["experiment"], x["interface"]) for x in runs) == [
        ("abw-tat", "op0"), ("abw-tat", "op1"), ("tat", "op0"), ("tat", "op1")], runs
    for run in runs:
        done = fleet.wait(run["id"], FINAL, timeout_s=400)
        assert done["state"] == "done", story(done)
    for run in runs:
        if run["experiment"] == "abw-tat":
            check_session(fleet, run["id"], "se-01", constant=True,
                          run_s=run["parameters"]["run_s"])
    check_release(fleet, campaign["id"])


@pytest.mark.quiet  # the estimator's latency under 1.5 s
@pytest.mark.parametrize(("node", "interface", "constant"), [
    ("no-01", "op0", False),  # Telenor's rate changes every compressed hour (20 s)
])
def test_abw_tat_session_on_each_operator(fleet: Fleet, node: str, interface: str,
                                          constant: bool) -> None:
    """ABW-TAT-ABW, pause, ABW-TAT-ABW with 20 s runs on the operator the demo test
    above does not reach (Sweden's two are in it), at a fraction of TAT's traffic."""
    run_id = fleet.submit(node, interface, "abw-tat", run_s=20, pause_s=5, repetitions=1)
    run = fleet.wait(run_id, FINAL, timeout_s=400)
    assert run["state"] == "done", story(run)
    check_session(fleet, run_id, node, constant=constant, run_s=20)


@pytest.mark.quiet  # at least 90 bins of 100 ms from a 10 s run
def test_abw_tat_session_with_ditg_measures_the_uplink(fleet: Fleet) -> None:
    """One half with D-ITG as the TAT tool: ITGSend on the node, the server's ITGRecv,
    its log fetched back and decoded into 100 ms receiver bins like iperf3's."""
    run_id = fleet.submit("se-02", "op0", "abw-tat", run_s=10, halves=1, repetitions=1,
                          tat_tool="ditg")
    run = fleet.wait(run_id, FINAL, timeout_s=300)
    assert run["state"] == "done", story(run)
    result = fleet.get(f"/api/v1/runs/{run_id}/result")
    assert "error" not in result, result
    assert [(s["kind"], s.get("tool")) for s in result["steps"]] == [
        ("abw", None), ("tat", "ditg"), ("abw", None)]
    assert abs(result["summary"]["tat_mean_bps"] - 10e6) / 10e6 < 0.15, result["summary"]
    bundle = fleet.http.get(f"/api/v1/runs/{run_id}/bundle")
    assert bundle.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(bundle.content)) as tar:
        names = set(tar.getnames())
        tat_file = tar.extractfile("results/tat-1.json")
        assert tat_file is not None
        tat = json.loads(tat_file.read())
    assert tat["tool"] == "ditg" and tat["bins_source"] == "receiver"
    assert len(tat["bins"]) >= 90
    assert {"results/ditg-1-recv.log", "results/ditg-1-bitrate.txt"} <= names


def hourly_campaign(fleet: Fleet) -> None:
    """The test below, run side by side with test_alerting's stopped node (no-01)."""
    def submit(spec: dict[str, Any]) -> dict[str, Any]:
        r = fleet.http.post("/api/v1/campaigns", json=spec)
        assert r.status_code == 201, r.text
        out: dict[str, Any] = r.json()
        return out

    def spec(name: str, start: datetime, anchor: datetime) -> dict[str, Any]:
        return {"version": 2, "name": name, "nodes": ["se-01", "se-02"],
                "select": "interface:op0",
                # ABW-TAT-ABW, one half (the session must fit a compressed hour)
                "steps": [{"experiment": "abw-tat", "parameters": {
                    "run_s": 5, "estimates": 1, "halves": 1, "repetitions": 1}}],
                "recurrence": {"kind": "every", "hours": 1, "start": start.isoformat(),
                               "end": (start + timedelta(hours=3)).isoformat()},
                "time_scale": 60, "time_anchor": anchor.isoformat()}

    fleet.wait_online("se-01")
    fleet.wait_online("se-02")
    # one session's reservation on se-02's SIM, from a probe campaign cancelled at once
    now = datetime.now(UTC)
    probe = submit(spec("probe", now + timedelta(hours=10), now))
    reserved = max(r["reserved_bytes"] for r in probe["runs"] if r["node"] == "se-02")
    for r in probe["runs"]:
        # (a cancel racing the heartbeat that hands the run out still cancels it)
        cancelled = fleet.http.post(f"/api/v1/runs/{r['id']}/cancel", json={"reason": "probe"})
        assert cancelled.status_code == 200, cancelled.text
    # A probe run already handed to its node keeps its reservation until the node says
    # it dropped it (its next heartbeat): wait for every probe run to be settled.
    until = time.monotonic() + 60
    while any(fleet.get(f"/api/v1/runs/{r['id']}")["charged_bytes"] is None
              for r in probe["runs"]):
        assert time.monotonic() < until, "probe runs' reservations never released"
        time.sleep(1)
    # The cap is monthly: earlier runs on this SIM count. Usable is 95% of the cap;
    # leave room for two more sessions and a half, so the third does not fit.
    used = fleet.get("/api/v1/nodes/se-02/interfaces/op0/quota")["used"]
    cap = int((used + reserved * 2.5) / 0.95)
    r = fleet.http.put("/api/v1/nodes/se-02/interfaces/op0/quota",
                       json={"cap_bytes": cap, "reset_day": 1, "margin": 0.05})
    assert r.status_code == 200, r.text
    try:
        # The planner keeps the anchor in whole seconds (sessions are named by whole-second
        # starts), so the wall-clock hours below start from the same truncated instant.
        anchor = datetime.now(UTC).replace(microsecond=0)
        start = anchor + timedelta(minutes=20)  # 20 s of wall time from now
        out = submit(spec("hourly", start, anchor))
        by_node: dict[str, list[dict[str, Any]]] = {}
        for run in out["runs"]:
            by_node.setdefault(run["node"], []).append(run)
        assert len(by_node["se-01"]) == 3 and len(by_node["se-02"]) == 2, out["runs"]
        deferred = [d for d in out["decisions"] if d["node"] == "se-02"]
        assert deferred and deferred[0]["code"] == "sim_cap", out["decisions"]
        assert "cap" in deferred[0]["message"]

        for run in out["runs"]:
            done = fleet.wait(run["id"], FINAL, timeout_s=300)
            assert done["state"] == "done", story(done)
            # on schedule: it started inside its (compressed) hour
            session = datetime.fromisoformat(run["session"])
            hour_start = anchor + (session - anchor) / 60
            started = next(datetime.fromisoformat(e["at"]) for e in done["events"]
                           if e["state"] == "running")
            assert hour_start <= started < hour_start + timedelta(seconds=60), (run, started)
            result = fleet.get(f"/api/v1/runs/{run['id']}/result")
            assert [step["kind"] for step in result["steps"]] == ["abw", "tat", "abw"], result
        quota = fleet.get("/api/v1/nodes/se-02/interfaces/op0/quota")
        assert 0 < quota["used"] <= cap, quota
        # the CLI's key figures: each session's TAT and ABw rates and their difference
        table = fleet.cli("results", out["id"]).splitlines()
        for run in out["runs"]:
            [line] = [row for row in table if row.startswith(run["id"])]
            assert line.count("Mbit/s") == 2 and "%" in line, line
    finally:  # the other tests' runs on this SIM need a cap with room
        fleet.http.put("/api/v1/nodes/se-02/interfaces/op0/quota",
                       json={"cap_bytes": 2_000_000_000, "reset_day": 1, "margin": 0.05})


def on_replica(fleet: Fleet, replica: str, method: str, path: str,
               body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """A request to one orchestrator replica itself, not through the front (which
    sends each request to either): from inside its container, as the admin."""
    code = (
        "import json, sys, urllib.error, urllib.request\n"
        "method, path, token, body = sys.argv[1:5]\n"
        "req = urllib.request.Request('http://127.0.0.1:8080' + path, method=method,\n"
        "    data=body.encode() if body else None, headers={\n"
        "    'Authorization': 'Bearer ' + token, 'Content-Type': 'application/json'})\n"
        "try:\n"
        "    r = urllib.request.urlopen(req, timeout=30)\n"
        "except urllib.error.HTTPError as e:\n"
        "    r = e\n"
        "print(json.dumps([r.status, r.read().decode()]))"
    )
    out = subprocess.run(
        ["docker", "exec", replica, "python3", "-c", code, method, path, fleet.token,
         json.dumps(body) if body is not None else ""],
        capture_output=True, text=True, check=True).stdout
    status, text = json.loads(out)
    return status, json.loads(text) if text else None


def wait_release(fleet: Fleet, replica: str, release: str, *, job_done: bool) -> Any:
    """The release's record from ``replica`` once its job is over."""
    deadline = time.monotonic() + 300
    while True:
        status, rec = on_replica(fleet, replica, "GET", f"/api/v1/datasets/{release}")
        assert status == 200, rec
        if rec["job"] is None and (rec["state"] != "building" or not job_done):
            return rec
        assert time.monotonic() < deadline, rec
        time.sleep(1)


def check_release(fleet: Fleet, campaign: str) -> None:
    """Waits for every done session's TAT to be in the store (the page reads it), then
    builds the campaign's release through the HTTP API on the second replica, verifies
    it again through the first (the job's record and the files on the volume they
    share) and with the CLI there, downloads it through the front, and compares the
    summary recomputed from its tables with the page's."""
    deadline = time.monotonic() + 300
    while True:
        runs = fleet.get(f"/api/v1/campaigns/{campaign}")["runs"]
        # a TAT run's one transfer, a session's two
        tats = sum((2 if r["experiment"] == "abw-tat" else 1) for r in runs
                   if r["state"] == "done")
        [[_, n]] = fleet.influx("SELECT count(mean_bps) FROM tat_summary WHERE "
                                f"campaign = '{campaign}'") or [[0, 0]]
        if all(r["state"] in FINAL for r in runs) and n >= tats:
            break
        assert time.monotonic() < deadline, f"{n} of {tats} TAT transfers ingested: {runs}"
        time.sleep(2)
    status, rec = on_replica(fleet, "testbed-orchestrator-2", "POST", "/api/v1/datasets",
                             {"campaigns": [campaign], "raw": True})
    assert status == 202 and rec["state"] == "building", rec
    release = rec["id"]
    rec = wait_release(fleet, "testbed-orchestrator", release, job_done=True)
    assert rec["state"] == "ready" and rec["problems"] == [], rec
    assert rec["runs"] == len(runs) and rec["rows"]["tat_summaries"] == n, rec
    status, rec = on_replica(fleet, "testbed-orchestrator", "POST",
                             f"/api/v1/datasets/{release}/verify")
    assert status == 202 and rec["job"] == "verify", rec
    verified = wait_release(fleet, "testbed-orchestrator", release, job_done=True)
    assert verified["problems"] == [] and verified["verified_at"] > rec["verified_at"], verified
    stored = f"/var/lib/testbed/releases/{release}"
    assert "all good" in fleet.cli("dataset", "verify", stored)
    files = fleet.get(f"/api/v1/datasets/{release}/files")
    assert any(f["path"].startswith("raw/") for f in files), files
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for f in files:
            got = fleet.http.get(f"/api/v1/datasets/{release}/files/{f['path']}")
            assert got.status_code == 200, (f, got.text)
            assert got.headers["Digest"] == f"sha-256={f['sha256']}"
            (root / f["path"]).parent.mkdir(parents=True, exist_ok=True)
            (root / f["path"]).write_bytes(got.content)
        assert verify_release(root).problems == []  # the downloaded copy is whole
        recomputed = recomputed_summary(root)
    page = fleet.http.get("/pages/abw-tat", params={"campaign": campaign})
    assert page.status_code == 200
    shown = page_summary(page.text)
    # RD and volume ratio per operator (both of se-01's), and the rest of the table
    assert len({row[:2] for row in shown}) >= 2 and recomputed == shown, (recomputed, shown)


@pytest.mark.side_by_side("minutes", hourly_campaign)
def test_compressed_hourly_campaign_runs_on_schedule_within_a_tight_cap(
        side_by_side: SideBySide) -> None:
    """An hourly ABw-TAT-ABw campaign in compressed time (an hour a minute) on two
    nodes: every session starts in its hour; a SIM capped for two sessions gets the
    third deferred with a reason, and what it measured stays under its cap."""
    side_by_side.result(hourly_campaign)
