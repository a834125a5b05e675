"""What an upload holds and what the orchestrator says it holds never drift apart, and
the bytes held are bounded: through the HTTP API, on both databases.

- the drift cases of issue 19: a part removed by expiry, a crash between storing a
  chunk and committing, a partial write on a full disk (a real tmpfs; needs root);
- idle parts expire from the reaper's pass, and a node's unfinished uploads are capped;
- a bundle is taken only for a run its node took up (issue 17, item 5).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from orchestrator.services.context import Context
from orchestrator.services.reaper import reap
from orchestrator.settings import UploadSettings
from orchestrator.store.tables import Upload
from tests.conftest import require_root, require_tools
from tests.integration.conftest import Api
from tests.integration.test_api_uploads import (
    BUNDLE_URL,
    _bundle,
    _create,
    _patch,
    _running_run,
)

DAY = 86400.0


def _ctx(api: Api) -> Context:
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    return ctx


def _offset(api: Api, token: str, run_id: str) -> int:
    r = api.client.get(BUNDLE_URL.format(run_id), headers=api.node(token))
    assert r.status_code == 200, r.text
    offset: int = r.json()["offset"]
    return offset


def _part_size(api: Api, run_id: str) -> int:
    part = api.settings.upload_dir / f"{run_id}.part"
    return part.stat().st_size if part.exists() else 0


def _run(api: Api, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = api.client.get(f"/api/v1/runs/{run_id}", headers=api.admin).json()
    return run


def _assert_done_once(api: Api, run_id: str, data: bytes) -> None:
    run = _run(api, run_id)
    assert run["state"] == "done"
    assert run["bundle_sha256"] == hashlib.sha256(data).hexdigest()
    stored = list(api.settings.archive_dir.rglob("bundle.tar.gz"))
    assert len(stored) == 1 and stored[0].read_bytes() == data
    assert not list(api.settings.upload_dir.glob("*.part"))


def _partly_sent(api: Api, tmp_path: Path, *, share: int) -> tuple[str, str, bytes, int]:
    """A run in ``uploading`` with the first 1/``share`` of its bundle (200 kB,
    incompressible) sent: its node's token, its id, the bundle, the bytes sent."""
    token, run_id = _running_run(api)
    data = _bundle(tmp_path, run_id, payload=os.urandom(200_000))
    sent = len(data) // share
    _create(api, token, run_id, data)
    assert _patch(api, token, run_id, 0, data[:sent]).json()["offset"] == sent
    return token, run_id, data, sent


# -- drift cases -----------------------------------------------------------------------


def test_expired_part_is_reported_as_nothing_held_and_sent_again(
    api: Api, tmp_path: Path
) -> None:
    token, run_id, data, half = _partly_sent(api, tmp_path, share=2)

    api.clock.advance(api.settings.uploads.part_idle_expire_s + 60)
    reap(_ctx(api))
    assert _part_size(api, run_id) == 0
    assert _offset(api, token, run_id) == 0
    stale = _patch(api, token, run_id, half, data[half:])
    assert stale.status_code == 409 and stale.json()["offset"] == 0

    assert _patch(api, token, run_id, 0, data).json()["complete"]
    _assert_done_once(api, run_id, data)


class Crash(Exception):
    """The process stops between storing a chunk and committing its transaction."""


@contextmanager
def _crash_at_commit(api: Api) -> Iterator[None]:
    engine = _ctx(api).db.engine

    def _commit(_conn: Any) -> None:
        raise Crash("stopped before the commit")

    event.listen(engine, "commit", _commit)
    try:
        yield
    finally:
        event.remove(engine, "commit", _commit)


def test_crash_between_storing_a_chunk_and_committing_keeps_offset_and_bytes_together(
    api: Api, tmp_path: Path
) -> None:
    token, run_id, data, third = _partly_sent(api, tmp_path, share=3)
    with _crash_at_commit(api), pytest.raises(Crash):
        _patch(api, token, run_id, third, data[third : 2 * third])
    # the chunk is stored, so it is held, and the offset says so
    assert _offset(api, token, run_id) == 2 * third == _part_size(api, run_id)
    assert _patch(api, token, run_id, 2 * third, data[2 * third :]).json()["complete"]
    _assert_done_once(api, run_id, data)


def test_crash_after_the_last_byte_is_verified_when_the_agent_comes_back(
    api: Api, tmp_path: Path
) -> None:
    token, run_id, data, half = _partly_sent(api, tmp_path, share=2)
    with _crash_at_commit(api), pytest.raises(Crash):
        _patch(api, token, run_id, half, data[half:])
    assert _run(api, run_id)["state"] == "uploading"
    # the agent declares its bundle again, as it does on every try: all bytes are held
    status = _create(api, token, run_id, data).json()
    assert status["complete"] and status["offset"] == len(data)
    _assert_done_once(api, run_id, data)


@pytest.fixture
def small_upload_disk(api: Api) -> Iterator[Path]:
    """A 400 KiB tmpfs over the orchestrator's upload directory."""
    require_root("mounting a small tmpfs")
    require_tools("mount", "umount")
    mnt = api.settings.upload_dir
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_partial_write_on_a_full_disk_is_cut_back_to_what_was_held(
    api: Api, small_upload_disk: Path, tmp_path: Path
) -> None:
    token, run_id = _running_run(api)
    data = _bundle(tmp_path, run_id, payload=os.urandom(600_000))  # incompressible
    chunk = 256 * 1024
    _create(api, token, run_id, data)
    assert _patch(api, token, run_id, 0, data[:chunk]).json()["offset"] == chunk
    full = _patch(api, token, run_id, chunk, data[chunk : 2 * chunk])  # 512 KiB > 400 KiB
    assert full.status_code == 507, full.text
    assert "free space" in full.json()["detail"]
    # part of the chunk reached the disk before it filled; none of it counts as held
    assert _offset(api, token, run_id) == chunk == _part_size(api, run_id)

    subprocess.run(["mount", "-o", "remount,size=4m", str(small_upload_disk)], check=True)
    offset = chunk
    while offset < len(data):
        offset = _patch(api, token, run_id, offset, data[offset : offset + chunk]).json()[
            "offset"
        ]
    _assert_done_once(api, run_id, data)


# -- expiry and the per-node cap (issue 17, item 7) -------------------------------------


def test_only_idle_unfinished_parts_expire(api: Api, tmp_path: Path) -> None:
    token, run_id, data, half = _partly_sent(api, tmp_path, share=2)
    idle = api.settings.uploads.part_idle_expire_s

    api.clock.advance(idle - 60)
    reap(_ctx(api))
    assert _part_size(api, run_id) == half  # not idle long enough
    _patch(api, token, run_id, half, data[half : half + 1000])  # a chunk: active again
    api.clock.advance(120)
    reap(_ctx(api))
    assert _part_size(api, run_id) == half + 1000
    api.clock.advance(idle)
    reap(_ctx(api))
    assert _part_size(api, run_id) == 0


def _uploading_run_on(api: Api, token: str) -> str:
    run_id: str = api.submit("se-01")["id"]
    api.heartbeat(token)
    for state in ("running", "uploading"):
        assert api.report(token, run_id, state).status_code == 204
    return run_id


def test_a_node_holds_at_most_its_cap_in_unfinished_uploads(api: Api, tmp_path: Path) -> None:
    ctx = _ctx(api)
    ctx.settings = ctx.settings.model_copy(update={"uploads": UploadSettings(
        max_bundle_bytes=400_000, max_part_bytes_per_node=500_000)})
    token, abandoned = _running_run(api)
    old = _bundle(tmp_path / "a", abandoned, payload=os.urandom(300_000))
    _create(api, token, abandoned, old)
    _patch(api, token, abandoned, 0, old[:300_000])  # never finished

    run_id = _uploading_run_on(api, token)
    data = _bundle(tmp_path / "b", run_id, payload=os.urandom(300_000))
    _create(api, token, run_id, data)
    assert _patch(api, token, run_id, 0, data[:150_000]).status_code == 200
    over = _patch(api, token, run_id, 150_000, data[150_000:])
    assert over.status_code == 507, over.text
    assert "unfinished uploads" in over.json()["detail"] and "retry later" in over.json()["detail"]
    assert _offset(api, token, run_id) == 150_000

    api.clock.advance(ctx.settings.uploads.part_idle_expire_s - 3600)
    _create(api, token, run_id, data)  # the agent retries; its own part stays fresh
    api.clock.advance(7200)
    reap(ctx)  # the abandoned part expires and frees the node's share
    assert _part_size(api, abandoned) == 0
    assert _patch(api, token, run_id, 150_000, data[150_000:]).json()["complete"]
    assert _run(api, run_id)["state"] == "done"


# -- only runs that ran have bundles (issue 17, item 5) ---------------------------------


def test_bundle_for_a_run_that_has_not_run_is_refused_and_the_real_one_lands(
    api: Api, tmp_path: Path
) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = api.submit("se-01")["id"]
    early = _bundle(tmp_path / "early", run_id, payload=b"forged")
    r = _create(api, token, run_id, early)
    assert r.status_code == 409, r.text
    assert r.json()["state"] == "scheduled" and "has not run yet" in r.json()["detail"]
    assert _patch(api, token, run_id, 0, early).status_code == 404  # nothing declared
    assert _run(api, run_id)["state"] == "scheduled"
    assert _run(api, run_id)["bundle_sha256"] is None

    api.heartbeat(token)
    for state in ("running", "uploading"):
        api.report(token, run_id, state)
    data = _bundle(tmp_path / "real", run_id)
    _create(api, token, run_id, data)
    assert _patch(api, token, run_id, 0, data).json()["complete"]
    _assert_done_once(api, run_id, data)


def test_chunks_for_a_run_that_has_not_run_are_refused_even_if_declared_before(
    api: Api, tmp_path: Path
) -> None:
    """An upload declared before the rule existed (an old database) takes no chunk."""
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = api.submit("se-01")["id"]
    data = _bundle(tmp_path, run_id, payload=b"forged")
    with _ctx(api).db.session() as s:
        s.add(Upload(run_id=run_id, size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                     created_at=api.clock.now(), updated_at=api.clock.now()))
    r = _patch(api, token, run_id, 0, data)
    assert r.status_code == 409 and r.json()["state"] == "scheduled", r.text
    assert _run(api, run_id)["bundle_sha256"] is None
    assert not list(api.settings.archive_dir.rglob("bundle.tar.gz"))


def test_a_run_cancelled_before_it_started_takes_no_bundle(api: Api, tmp_path: Path) -> None:
    """Cancelled before it was handed to its node (still scheduled). One cancelled once
    assigned may have run offline before its node learned of the cancel, and its bundle
    is taken (tests/integration/test_offline_schedule.py)."""
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = api.submit("se-01")["id"]
    api.client.post(f"/api/v1/runs/{run_id}/cancel", headers=api.admin, json={})
    r = _create(api, token, run_id, _bundle(tmp_path, run_id))
    assert r.status_code == 409, r.text
    assert r.json()["state"] == "cancelled" and "never started" in r.json()["detail"]


def test_a_failed_runs_logs_are_kept(api: Api, tmp_path: Path) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = api.submit("se-01")["id"]
    api.heartbeat(token)
    api.report(token, run_id, "deploying")
    api.report(token, run_id, "failed", "image pull failed")
    data = _bundle(tmp_path, run_id, payload=b"pull log")
    _create(api, token, run_id, data)
    assert _patch(api, token, run_id, 0, data).json()["complete"]
    run = _run(api, run_id)
    assert run["state"] == "failed" and run["bundle_sha256"] == hashlib.sha256(data).hexdigest()
