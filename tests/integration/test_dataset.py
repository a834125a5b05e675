"""A dataset release built from a real archive and database (issue 15).

Real parts: the orchestrator app on SQLite and PostgreSQL, a campaign booked by the
planner, bundles uploaded through the agent API (results, the agent's records and a
real header capture), then ``testbed dataset build`` and ``verify`` through the CLI.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from orchestrator.analysis.abwtat import operator_figures, pair_sessions
from orchestrator.analysis.capture import reference_flows
from orchestrator.analysis.pcap import read_capture
from orchestrator.cli import main as cli_main
from orchestrator.services.context import Context
from orchestrator.services.ingest import ingest_pending
from studies.abw_tat.release import abw_rows, tat_summary_rows
from testbed_common import wire
from testbed_common.bundle import build_bundle
from tests.integration import influxd
from tests.integration.conftest import Api
from tests.recorded import tat_result
from tests.release import page_summary, recomputed_summary

FIXTURES = Path(__file__).parents[1] / "unit" / "fixtures"
CAPTURE = (FIXTURES / "tcp-6mbit-any.pcap").read_bytes()
SERVER = "172.30.1.10"  # the measurement server, named in the TAT result
NODE_ADDRESS = "172.30.1.2"  # the node's modem address, named in its records
IMAGE_ID = "sha256:" + "ab" * 32  # what the agent recorded as the image that ran
ICCID = "8946000000123456789"  # the SIM's serial, as the agent records it
MODEM_ID = "1f2e3d4c5b6a7988"  # the agent's unkeyed digest of the modem's IMEI


def _abw(start: datetime, estimate: float, step: int) -> str:
    return json.dumps({"type": "estimate", "method": "yaz", "direction": "uplink",
                       "estimate_bps": estimate, "latency_s": 0.8, "bytes_sent": 40_000,
                       "control_bytes": 1000, "packets_sent": 40,
                       "start_unix_s": start.timestamp() + step, "server": SERVER}) + "\n"


def _bundle(api: Api, node: str, run_id: str, tmp: Path, *, rate: float) -> bytes:
    now = api.clock.now()
    root = tmp / run_id
    (root / "results").mkdir(parents=True)
    (root / "meta").mkdir()
    tat = {**tat_result(server=SERVER), "start": now.isoformat()}
    (root / "results" / "tat-1.json").write_text(json.dumps(tat))
    (root / "results" / "abw-0-yaz.jsonl").write_text(_abw(now, rate, -5))
    (root / "results" / "abw-2-yaz.jsonl").write_text(_abw(now, rate * 1.1, 5))
    (root / "results" / "capture.pcap").write_bytes(CAPTURE)
    (root / "results" / "session.log").write_text(f"connected to {SERVER} port 5201\n")
    (root / "meta" / "gps.jsonl").write_text(json.dumps(
        {"time": now.isoformat(), "lat": 59.334591, "lon": 18.063240, "alt": 20.0}) + "\n")
    (root / "meta" / "system.jsonl").write_text(json.dumps(
        {"time": now.isoformat(), "cpu_pct": 12.5, "mem_pct": 40.0,
         "temperature_c": 51.0, "disk_free_bytes": 10**9}) + "\n")
    (root / "meta" / "modem.jsonl").write_text(json.dumps(
        {"time": now.isoformat(), "interface": "op0", "mcc_mnc": "240-01",
         "operator": "Telia", "rsrp": -95.0, "rat": "4G", "address": NODE_ADDRESS,
         "iccid": ICCID, "modem_id": MODEM_ID}) + "\n")
    (root / "meta" / "run.json").write_text(json.dumps(
        {"format": "testbed.run-meta", "version": 1, "image": "testbed/exp-tat:1",
         "image_id": IMAGE_ID, "agent_version": "0.1.0", "started_at": now.isoformat(),
         "bytes_used": 4_000_000, "clock": None}))
    return build_bundle(root, run_id=run_id, node_id=node)


def _run(api: Api, node: str, token: str, run_id: str, tmp: Path, rate: float) -> None:
    api.heartbeat(token)
    for state in ("running", "uploading"):
        api.report(token, run_id, state)
    data = _bundle(api, node, run_id, tmp, rate=rate)
    url = f"{wire.AGENT_PREFIX}/runs/{run_id}/bundle"
    api.client.post(url, headers=api.node(token),
                    json={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    r = api.client.patch(url, content=data, headers={**api.node(token),
                                                     wire.UPLOAD_OFFSET_HEADER: "0"})
    assert r.status_code == 200 and r.json()["complete"], (r.status_code, r.text)


def finished_campaign(api: Api, tmp_path: Path) -> str:
    """A campaign of two runs on se-01's Telia SIM and two on se-02's, all done: each a
    TAT transfer between two ABw estimates, with a capture and the agent's records."""
    tokens = {
        "se-01": api.add_node("se-01", [("op0", "240-01", "Telia")],
                              timezone="Europe/Stockholm"),
        "se-02": api.add_node("se-02", [("op0", "240-01", "Telia")], timezone="UTC"),
    }
    spec = {"version": 2, "name": "release", "project": "default",
            "nodes": ["se-01", "se-02"], "steps": [{"experiment": "tat"}], "repetitions": 2}
    r = api.client.post("/api/v1/campaigns", headers=api.admin, json=spec)
    assert r.status_code == 201, r.text
    out = r.json()
    runs = sorted(out["runs"], key=lambda r: r["not_before"])
    assert len(runs) == 4, runs
    for n, run in enumerate(runs):
        api.clock.t = max(api.clock.t, datetime.fromisoformat(run["not_before"]))
        _run(api, run["node"], tokens[run["node"]], run["id"], tmp_path / "bundles", 5e6 + n * 1e5)
        api.clock.advance(60)
    return str(out["id"])


@pytest.fixture
def campaign(api: Api, tmp_path: Path) -> Iterator[str]:
    yield finished_campaign(api, tmp_path)


def build(api: Api, monkeypatch: pytest.MonkeyPatch, *args: str) -> Any:
    for key, value in {
        "TESTBED_DATABASE_URL": api.settings.database_url,
        "TESTBED_ARCHIVE_DIR": str(api.settings.archive_dir),
        "TESTBED_UPLOAD_DIR": str(api.settings.upload_dir),
        "TESTBED_EXPERIMENTS_DIR": str(api.settings.experiments_dir),
        "TESTBED_ADMIN_TOKEN": api.settings.admin_token,
        "TESTBED_ENVIRONMENT": "development",
    }.items():
        monkeypatch.setenv(key, value)
    return CliRunner().invoke(cli_main.cli, ["dataset", *args])


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_release_from_archive_is_complete_anonymised_and_reproducible(
        api: Api, campaign: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "release.key"
    key.write_text("00112233445566778899aabbccddeeff" * 2 + "\n")
    profile = tmp_path / "telia.yaml"
    profile.write_text("rate_mbit: 10\n")
    args = [campaign, "--key-file", str(key), "--raw", "--version", "2026.11.22",
            "--exclude", "node:se-02=owner withdrew consent",
            "--link-profile", f"se-01/op0={profile}"]
    first = build(api, monkeypatch, "build", *args, "--out", str(tmp_path / "a"))
    assert first.exit_code == 0, first.output
    assert "left out run" in first.output and "owner withdrew consent" in first.output
    second = build(api, monkeypatch, "build", *args, "--out", str(tmp_path / "b"))
    assert second.exit_code == 0, second.output
    a, b = files(tmp_path / "a"), files(tmp_path / "b")
    assert a == b  # byte for byte, every file

    verified = build(api, monkeypatch, "verify", str(tmp_path / "a"))
    assert verified.exit_code == 0, verified.output

    root = tmp_path / "a"
    runs = pq.read_table(root / "tables/runs.parquet").to_pylist()
    assert {r["node"] for r in runs} == {"se-01"} and len(runs) == 2
    assert all(r["timezone"] == "Europe/Stockholm" and r["state"] == "done" for r in runs)
    readme = (root / "README.md").read_text()
    assert "node se-02: owner withdrew consent" in readme
    assert "link-profiles/se-01-op0.yaml" in readme and "CC-BY-4.0" in readme
    assert f"testbed/exp-tat:1 ({IMAGE_ID})" in readme
    assert "CC-BY-4.0" in json.loads((root / "datapackage.json").read_text())[
        "licenses"][0]["name"]

    # every table in both formats, the same rows
    for name in ("tat_bins", "tat_summaries", "abw_estimates", "modem", "positions",
                 "system_health", "abw_tat_sessions", "flows"):
        table = pq.read_table(root / f"tables/{name}.parquet")
        lines = (root / f"tables/{name}.csv").read_text().splitlines()
        assert table.num_rows == len(lines) - 1 > 0, name
    positions = pq.read_table(root / "tables/positions.parquet").to_pylist()
    assert {(p["lat"], p["lon"]) for p in positions} == {(59.335, 18.065)}  # 0.01° cell

    # no original address anywhere, as bytes or as text; flows still told apart
    capture = read_capture(CAPTURE)
    originals = {a for p in capture.packets for a in (p.src, p.dst)}
    originals |= {ipaddress.ip_address(a).packed for a in (SERVER, NODE_ADDRESS)}
    for path, data in a.items():
        for address in originals:
            assert address not in data or path.endswith(".parquet"), (path, address)
            assert str(ipaddress.ip_address(address)).encode() not in data, (path, address)
    # no SIM serial, modem id or exact position either; the SIM still told apart
    for path, data in a.items():
        for secret in (ICCID, MODEM_ID, "59.334591", "18.06324"):
            assert secret.encode() not in data, (path, secret)
    modem = json.loads(a["raw/" + runs[0]["run"] + "/meta/modem.jsonl"])
    assert modem["iccid"].startswith("iccid-") and modem["modem_id"].startswith("modem-")
    assert json.loads(a["raw/" + runs[1]["run"] + "/meta/modem.jsonl"])["iccid"] == \
        modem["iccid"]
    published = read_capture(a["raw/" + runs[0]["run"] + "/results/capture.pcap"])
    assert published.packets and all(p.payload >= 0 for p in published.packets)
    flows = pq.read_table(root / "tables/flows.parquet").to_pylist()
    endpoints = {(f["client_address"], f["client_port"], f["server_address"],
                  f["server_port"]) for f in flows if f["run"] == runs[0]["run"]}
    assert len(endpoints) == len(reference_flows(CAPTURE).flows) > 1

    # the ABw-TAT figures recomputed from the tables alone equal the release's pairs
    tat = tat_summary_rows(pq.read_table(root / "tables/tat_summaries.parquet").to_pylist())
    abw = abw_rows(pq.read_table(root / "tables/abw_estimates.parquet").to_pylist())
    pairs, _ = pair_sessions(tat, abw)
    published_pairs = pq.read_table(root / "tables/abw_tat_sessions.parquet").to_pylist()
    assert sorted(p.rd for p in pairs) == sorted(p["rd"] for p in published_pairs)
    [figures] = operator_figures(pairs)
    assert figures.operator == "Telia (240-01)" and figures.volume_ratio > 1


def test_verify_says_exactly_what_is_wrong(
        api: Api, campaign: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "rel"
    done = build(api, monkeypatch, "build", campaign, "--out", str(root), "--pseudonymise-nodes")
    assert done.exit_code == 0, done.output
    assert (tmp_path / "rel.key").exists()  # made beside, never inside
    assert "se-01" not in (root / "tables/runs.csv").read_text()
    good = tmp_path / "good"
    shutil.copytree(root, good)
    (root / "tables/tat_bins.csv").write_text("time_utc\n")
    (root / "extra.txt").write_text("x")
    (root / "CITATION.cff").unlink()
    out = build(api, monkeypatch, "verify", str(root))
    assert out.exit_code != 0
    assert "tables/tat_bins.csv: SHA-256" in out.output
    assert "extra.txt: not in SHA256SUMS" in out.output
    assert "CITATION.cff: listed in SHA256SUMS but missing" in out.output
    assert "columns ['time_utc'] are not the schema's" in out.output
    assert build(api, monkeypatch, "verify", str(good)).exit_code == 0
    # the next day's release names the one before in its changelog
    day = api.clock.now().date().isoformat()
    daily = build(api, monkeypatch, "build", campaign, "--daily", day, "--previous",
                  str(good), "--key-file", str(tmp_path / "rel.key"), "--out",
                  str(tmp_path / day))
    assert daily.exit_code == 0, daily.output
    log = (tmp_path / day / "CHANGELOG.md").read_text()
    assert log.startswith(f"# Changelog\n\n## {day}\n\n- Follows 1.0.0.")
    assert "- runs: 4 rows (+0 since 1.0.0)." in log and "## 1.0.0" in log
    assert json.loads((tmp_path / day / "datapackage.json").read_text())["version"] == day
    nothing = build(api, monkeypatch, "build", campaign, "--daily", "2026-01-01",
                    "--out", str(tmp_path / "empty"))
    assert nothing.exit_code != 0 and "no finished run in that period" in nothing.output
    again = build(api, monkeypatch, "build", campaign, "--out", str(good))
    assert again.exit_code != 0 and "not empty" in again.output


@pytest.mark.requires(influxd.available())
def test_figures_recomputed_from_a_release_equal_the_abw_tat_page(
        api_influx: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Done-means 1 on real parts without the compose fleet: the runs ingested into a
    real InfluxDB, the page read over HTTP, the release built through the CLI."""
    api = api_influx
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    assert ctx.timeseries is not None
    ctx.timeseries.create_database()  # type: ignore[attr-defined]
    campaign = finished_campaign(api, tmp_path)
    assert ingest_pending(ctx, ctx.timeseries).written_runs == 4
    page = api.client.get("/pages/abw-tat", params={"campaign": campaign},
                          headers=api.admin)
    assert page.status_code == 200, page.text
    shown = page_summary(page.text)
    out = build(api, monkeypatch, "build", campaign, "--out", str(tmp_path / "rel"))
    assert out.exit_code == 0, out.output
    assert build(api, monkeypatch, "verify", str(tmp_path / "rel")).exit_code == 0
    assert len(shown) == 1 and shown[0][:4] == ("SE", "Telia (240-01)", "yaz", "4")
    assert recomputed_summary(tmp_path / "rel") == shown


def test_a_recorded_exclusion_holds_for_every_release_until_dropped(
        api: Api, campaign: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said = build(api, monkeypatch, "exclude", "sim:se-02/op0=SIM lent to another project")
    assert said.exit_code == 0, said.output
    assert build(api, monkeypatch, "exclude", "sim:se-02=x").exit_code != 0  # NODE/IFACE
    listed = build(api, monkeypatch, "exclusions")
    assert listed.output == "sim:se-02/op0\tSIM lent to another project\n"
    for n in (1, 2):  # every build, with no flag repeated
        out = build(api, monkeypatch, "build", campaign, "--out", str(tmp_path / f"r{n}"))
        assert out.exit_code == 0, out.output
        runs = pq.read_table(tmp_path / f"r{n}/tables/runs.parquet").to_pylist()
        assert {r["node"] for r in runs} == {"se-01"}
        assert "- sim se-02/op0: SIM lent to another project" in (
            tmp_path / f"r{n}/README.md").read_text()
    assert build(api, monkeypatch, "exclusions", "--drop", "sim:se-02/op0").exit_code == 0
    assert build(api, monkeypatch, "exclusions").output == ""
    out = build(api, monkeypatch, "build", campaign, "--out", str(tmp_path / "r3"))
    assert out.exit_code == 0, out.output
    assert pq.read_table(tmp_path / "r3/tables/runs.parquet").num_rows == 4
