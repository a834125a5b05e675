"""Resumable, idempotent bundle uploads, and hostile bundles, through the HTTP API."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from testbed_common import wire
from testbed_common.bundle import build_bundle
from tests.integration.conftest import Api

BUNDLE_URL = wire.AGENT_PREFIX + "/runs/{}/bundle"


def _running_run(api: Api) -> tuple[str, str]:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run = api.submit("se-01")
    api.heartbeat(token)
    api.report(token, run["id"], "running")
    api.report(token, run["id"], "uploading")
    return token, run["id"]


def _bundle(tmp: Path, run_id: str, payload: bytes = b"x" * 300_000) -> bytes:
    root = tmp / "b"
    (root / "results").mkdir(parents=True)
    (root / "results" / "tat.json").write_text(json.dumps({"format": "testbed.tat"}))
    (root / "results" / "noise.bin").write_bytes(payload)
    return build_bundle(root, run_id=run_id, node_id="se-01")


def _create(api: Api, token: str, run_id: str, data: bytes) -> Any:
    return api.client.post(BUNDLE_URL.format(run_id), headers=api.node(token),
                           json={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()})


def _patch(api: Api, token: str, run_id: str, offset: int, chunk: bytes) -> Any:
    return api.client.patch(
        BUNDLE_URL.format(run_id), content=chunk,
        headers={**api.node(token), wire.UPLOAD_OFFSET_HEADER: str(offset),
                 "Content-Type": "application/offset+octet-stream"},
    )


def test_cut_upload_resumes_and_is_stored_exactly_once(api: Api, tmp_path: Path) -> None:
    token, run_id = _running_run(api)
    data = _bundle(tmp_path, run_id, payload=bytes(range(256)) * 2000)
    assert _create(api, token, run_id, data).json()["offset"] == 0
    half = len(data) // 2
    assert _patch(api, token, run_id, 0, data[:half]).json()["offset"] == half
    # the connection drops; the agent asks where to resume and a stale offset is refused
    status = api.client.get(BUNDLE_URL.format(run_id), headers=api.node(token)).json()
    assert status["offset"] == half and not status["complete"]
    stale = _patch(api, token, run_id, 0, data[:half])
    assert stale.status_code == 409 and stale.json()["offset"] == half
    again = _create(api, token, run_id, data).json()  # re-declaring keeps the bytes held
    assert again["offset"] == half
    done = _patch(api, token, run_id, half, data[half:]).json()
    assert done["complete"]

    run = api.client.get(f"/api/v1/runs/{run_id}", headers=api.admin).json()
    assert run["state"] == "done"
    assert run["bundle_sha256"] == hashlib.sha256(data).hexdigest()
    stored = list(api.settings.archive_dir.rglob("bundle.tar.gz"))
    assert len(stored) == 1 and stored[0].read_bytes() == data
    sums = stored[0].with_name("bundle.sha256").read_text().split()
    assert sums == [hashlib.sha256(data).hexdigest(), "bundle.tar.gz"]

    # uploading the same bundle again stores nothing new and says it is complete
    assert _create(api, token, run_id, data).json()["complete"] is True
    assert len(list(api.settings.archive_dir.rglob("bundle.tar.gz"))) == 1
    download = api.client.get(f"/api/v1/runs/{run_id}/bundle", headers=api.admin)
    assert download.content == data
    assert "testbed_upload_bytes_total" in api.client.get("/metrics").text


def test_different_bundle_for_a_done_run_is_refused(api: Api, tmp_path: Path) -> None:
    token, run_id = _running_run(api)
    data = _bundle(tmp_path, run_id)
    _create(api, token, run_id, data)
    _patch(api, token, run_id, 0, data)
    other = _bundle(tmp_path / "2", run_id, payload=b"y" * 10)
    r = _create(api, token, run_id, other)
    assert r.status_code == 409 and "already has an archived bundle" in r.json()["detail"]


def _hostile(member: str, kind: bytes = tarfile.REGTYPE) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.type = kind
        if kind == tarfile.SYMTYPE:
            info.linkname = "/etc/passwd"
            tar.addfile(info)
        else:
            info.size = 4
            tar.addfile(info, io.BytesIO(b"evil"))
    return buf.getvalue()


def test_path_traversal_bundle_is_refused_and_nothing_is_stored(
    api: Api, tmp_path: Path
) -> None:
    token, run_id = _running_run(api)
    for data, needle in ((_hostile("../../escape.txt"), "traversal"),
                         (_hostile("results/link", tarfile.SYMTYPE), "regular files")):
        _create(api, token, run_id, data)
        r = _patch(api, token, run_id, 0, data)
        assert r.status_code == 422, r.text
        assert needle in r.json()["detail"]
        assert r.json()["fault"] == "refused"  # the agent keeps it aside, never resends
        assert "cannot help" in r.json()["detail"]
    assert not list(api.settings.archive_dir.rglob("*.tar.gz"))
    assert not (tmp_path / "escape.txt").exists()
    run = api.client.get(f"/api/v1/runs/{run_id}", headers=api.admin).json()
    assert run["state"] == "uploading" and run["bundle_sha256"] is None


def test_oversized_bundle_is_refused_before_any_byte(api: Api) -> None:
    token, run_id = _running_run(api)
    limit = api.settings.uploads.max_bundle_bytes
    r = api.client.post(BUNDLE_URL.format(run_id), headers=api.node(token),
                        json={"size": limit + 1, "sha256": "0" * 64})
    assert r.status_code == 413
    assert "limit" in r.json()["detail"]


def test_corrupted_bytes_are_detected_by_checksum(api: Api, tmp_path: Path) -> None:
    token, run_id = _running_run(api)
    data = _bundle(tmp_path, run_id)
    _create(api, token, run_id, data)
    flipped = bytes([data[0] ^ 0xFF]) + data[1:]
    r = _patch(api, token, run_id, 0, flipped)
    assert r.status_code == 422 and "corrupted in transit" in r.json()["detail"]
    assert r.json()["fault"] == "corrupted"
    # the agent can start over and succeed
    assert _patch(api, token, run_id, 0, data).json()["complete"]


def test_second_half_corrupted_is_sent_again_from_zero_and_the_run_ends_done(
    api: Api, tmp_path: Path
) -> None:
    """Issue 19's sequence: the reset after a checksum mismatch must outlive the error's
    rollback, or the offset says 1499 while nothing usable is held, for good."""
    token, run_id = _running_run(api)
    data = _bundle(tmp_path, run_id)
    half = len(data) // 2
    assert _create(api, token, run_id, data).json()["offset"] == 0
    assert _patch(api, token, run_id, 0, data[:half]).json()["offset"] == half
    damaged = data[half:-1] + bytes([data[-1] ^ 0xFF])
    r = _patch(api, token, run_id, half, damaged)
    assert r.status_code == 422, r.text
    assert r.json()["fault"] == "corrupted"
    assert "from offset 0" in r.json()["detail"]

    # what it says is what it holds: nothing
    status = api.client.get(BUNDLE_URL.format(run_id), headers=api.node(token)).json()
    assert status["offset"] == 0 and not status["complete"]
    assert _create(api, token, run_id, data).json()["offset"] == 0  # re-declaring agrees
    assert not list(api.settings.upload_dir.glob("*.part"))

    assert _patch(api, token, run_id, 0, data[:half]).json()["offset"] == half
    assert _patch(api, token, run_id, half, data[half:]).json()["complete"]
    run = api.client.get(f"/api/v1/runs/{run_id}", headers=api.admin).json()
    assert run["state"] == "done"
    assert run["bundle_sha256"] == hashlib.sha256(data).hexdigest()
    stored = list(api.settings.archive_dir.rglob("bundle.tar.gz"))
    assert len(stored) == 1 and stored[0].read_bytes() == data


def _send_all(api: Api, token: str, run_id: str, data: bytes, chunk: int,
              start: threading.Barrier, replies: list[int]) -> bool:
    """One sender of ``data``, as the agent sends: declare, then chunks from wherever
    the orchestrator says its part ends (409 says where). True once told complete."""
    start.wait()
    status = _create(api, token, run_id, data).json()
    while not status["complete"]:
        offset = status["offset"]
        r = _patch(api, token, run_id, offset, data[offset:offset + chunk])
        replies.append(r.status_code)
        assert r.status_code in (200, 409), r.text
        status = r.json() if r.status_code == 200 else {"offset": r.json()["offset"],
                                                         "complete": False}
    return True


def test_the_same_bundle_sent_twice_at_once_is_archived_once(api: Api, tmp_path: Path) -> None:
    """Two senders of one bundle at once (a node's agent and a copy of it, or a retry
    racing the first try): both are told it is complete, or told the offset to resume
    from; it is verified, archived and made done once."""
    token, run_id = _running_run(api)
    data = _bundle(tmp_path, run_id, payload=os.urandom(400_000))
    start = threading.Barrier(2)
    replies: list[int] = []
    with ThreadPoolExecutor(2) as pool:
        senders = [pool.submit(_send_all, api, token, run_id, data, 50_000, start, replies)
                   for _ in range(2)]
        assert [s.result(timeout=120) for s in senders] == [True, True]
    run = api.client.get(f"/api/v1/runs/{run_id}", headers=api.admin).json()
    assert run["state"] == "done"
    assert [e["state"] for e in run["events"]].count("done") == 1
    stored = list(api.settings.archive_dir.rglob("bundle.tar.gz"))
    assert len(stored) == 1 and stored[0].read_bytes() == data
    assert not list(api.settings.upload_dir.iterdir())  # no part, no lock file left
