"""A bundle of any shape keeps the orchestrator's peak memory under the bound written in
docs/security.md ("Bundle inspection bounds").

The orchestrator runs in a process of its own; each bundle is uploaded to it over HTTP
in the largest chunks a node may send, and the server's peak resident set (VmHWM, reset
before each upload through /proc/PID/clear_refs) is read after. Hostile bundles are
refused with the reason; legitimate ones are archived byte for byte.
"""

from __future__ import annotations

import gc
import hashlib
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.settings import UploadSettings
from testbed_common import wire
from testbed_common.bundle import sha256_file
from tests.conftest import REPO, ManualClock
from tests.integration.bundle_probe import CASES, NODE
from tests.integration.conftest import Api, make_settings

URL = wire.AGENT_PREFIX + "/runs/{}/bundle"

pytestmark = pytest.mark.requires(
    None if Path("/proc/self/clear_refs").exists() else "needs Linux /proc to read peak memory")


def documented_bound() -> int:
    """The bound, bytes, as docs/security.md states it: one truth for test and docs."""
    text = (REPO / "docs" / "security.md").read_text()
    section = text.split("## Bundle inspection bounds", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"peak memory bound: (\d+) MiB", section)
    assert found, "docs/security.md must state 'peak memory bound: N MiB'"
    return int(found.group(1)) * 1024**2


def _kib(pid: int, field: str) -> int:
    found = re.search(rf"{field}:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    assert found
    return int(found.group(1)) * 1024


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Api, int]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = tmp_path / "server"
    work.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "tests.integration.bundle_probe",
                             str(work), str(port)], cwd=REPO)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600)
    try:
        for _ in range(300):
            try:
                if client.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield Api(client, ManualClock(), make_settings(work)), proc.pid
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)


def _upload(api: Api, token: str, run_id: str, path: Path, chunk: int) -> httpx.Response:
    r = api.client.post(URL.format(run_id), headers=api.node(token), json={
        "size": path.stat().st_size, "sha256": sha256_file(path)})
    assert r.status_code == 200, r.text
    offset = 0
    with path.open("rb") as f:
        while block := f.read(chunk):
            r = api.client.patch(URL.format(run_id), content=block, headers={
                **api.node(token), wire.UPLOAD_OFFSET_HEADER: str(offset),
                "Content-Type": "application/offset+octet-stream"})
            offset += len(block)
            if r.status_code != 200:
                break
    return r


def test_every_bundle_shape_stays_under_the_documented_memory_bound(
    server: tuple[Api, int], tmp_path: Path
) -> None:
    api, pid = server
    bound = documented_bound()
    chunk = UploadSettings().max_chunk_bytes
    token = api.add_node(NODE, [("op0", "240-01", "Telia")])
    figures: dict[str, int] = {}
    for name, (build, expected) in CASES.items():
        run = api.submit(NODE)
        api.heartbeat(token)
        api.report(token, run["id"], "running")
        api.report(token, run["id"], "uploading")
        path = build(tmp_path / f"{name}.tar.gz", run["id"])
        gc.collect()
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # the server's VmHWM := VmRSS
        base = _kib(pid, "VmRSS")
        r = _upload(api, token, run["id"], path, chunk)
        figures[name] = _kib(pid, "VmHWM") - base
        assert figures[name] <= bound, f"{name}: peak {figures[name]} bytes, over {bound}"
        if expected == "complete":
            assert r.status_code == 200 and r.json()["complete"], (name, r.text)
            stored = list(api.settings.archive_dir.rglob(f"{run['id']}/bundle.tar.gz"))
            assert len(stored) == 1
            assert sha256_file(stored[0]) == sha256_file(path) == hashlib.sha256(
                path.read_bytes()).hexdigest()
        else:
            assert r.status_code == 422, (name, r.text)
            assert expected in r.json()["detail"], (name, r.text)
            assert not list(api.settings.archive_dir.rglob(f"{run['id']}/*"))
        path.unlink()
    print({k: f"{v / 1024**2:.1f} MiB" for k, v in figures.items()})
