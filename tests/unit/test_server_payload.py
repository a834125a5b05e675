"""The measurement server's HTTP payload responder and goodput-sequence's client, on
the loopback: D bytes each way on fresh connections, clear refusals, and a whole run
of the entry point as its image runs it (the kit beside it, no site-packages)."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed_kit.goodput import FORMAT, VERSION, summarise, transfer_goodputs
from tests.conftest import REPO, load_server_module, stage_copies

payload = load_server_module("payload_server")


@pytest.fixture
def server() -> Iterator[int]:
    srv = payload.make_server("127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield int(srv.server_address[1])
    srv.shutdown()
    srv.server_close()


def test_requested_size_is_checked() -> None:
    assert payload.requested_size("/payload?bytes=4096") == 4096
    assert "outside" in payload.requested_size("/payload?bytes=0")
    assert "outside" in payload.requested_size(f"/payload?bytes={payload.MAX_BYTES + 1}")
    assert "as digits" in payload.requested_size("/payload?bytes=-3")
    assert "no such path" in payload.requested_size("/etc/passwd")


def test_download_and_upload_move_exactly_d_bytes(server: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    conn.request("GET", "/payload?bytes=100000")
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Connection") == "close"
    assert len(r.read()) == 100000
    conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    conn.request("POST", "/payload", body=bytes(70000))
    r = conn.getresponse()
    assert r.status == 200 and json.loads(r.read()) == {"received": 70000}
    conn.close()
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    conn.request("GET", "/payload?bytes=0")
    r = conn.getresponse()
    assert r.status == 400 and "outside" in json.loads(r.read())["error"]


@pytest.mark.parametrize("direction", ["downlink", "uplink"])
def test_the_entry_point_runs_the_protocol(server: int, tmp_path: Path,
                                           direction: str) -> None:
    dockerfile = REPO / "experiments" / "goodput-sequence" / "Dockerfile"
    stage_copies(dockerfile, tmp_path)
    script = tmp_path / "opt" / "goodput-sequence" / "goodput_sequence.py"
    results = tmp_path / "results"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "server_address": "127.0.0.1", "interface_address": "127.0.0.1",
        "parameters": {"size_bytes": 20000, "transfers": 8, "idle_gap_s": 0.2,
                       "direction": direction}}))
    proc = subprocess.run(
        [sys.executable, "-S", "-E", str(script)],
        env={"TESTBED_CONFIG": str(config), "TESTBED_RESULTS": str(results),
             "TESTBED_PAYLOAD_PORT": str(server)},
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((results / "goodput.json").read_text())
    assert (doc["format"], doc["version"]) == (FORMAT, VERSION)
    assert [t["index"] for t in doc["transfers"]] == list(range(1, 9))
    assert all(t["bytes"] == 20000 and t["connect_s"] <= t["total_s"]
               for t in doc["transfers"])
    assert doc["summary"] == summarise(transfer_goodputs(doc), 20000).as_dict()
    assert f"goodput-sequence: {direction} 8 x 20000 B" in proc.stderr


def test_a_refused_transfer_fails_the_run_with_its_reason(server: int,
                                                          tmp_path: Path) -> None:
    stage_copies(REPO / "experiments" / "goodput-sequence" / "Dockerfile", tmp_path)
    config = tmp_path / "config.json"
    # past the server's own bound: the manifest refuses it at submission; here the
    # server's refusal must still end the run with a reason
    config.write_text(json.dumps({"server_address": "127.0.0.1", "parameters": {
        "size_bytes": payload.MAX_BYTES + 1, "transfers": 7, "idle_gap_s": 0}}))
    proc = subprocess.run(
        [sys.executable, "-S", "-E",
         str(tmp_path / "opt" / "goodput-sequence" / "goodput_sequence.py")],
        env={"TESTBED_CONFIG": str(config), "TESTBED_RESULTS": str(tmp_path / "r"),
             "TESTBED_PAYLOAD_PORT": str(server)},
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1].startswith(
        "goodput-sequence failed: payload server answered 400")
