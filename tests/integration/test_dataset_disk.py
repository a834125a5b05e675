"""A dataset release that would not fit on its disk (issue 15): refused or stopped with
a message that says what to do, no partial release left, nothing of the archive lost.

Real parts: the app with its build job and the CLI on a campaign uploaded through the
agent API (tests/integration/test_dataset.py's), releases written on a real small
tmpfs (needs root), as test_api_upload_drift.py fills the upload disk.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pytest

from orchestrator.dataset.release import Release
from orchestrator.errors import NoSpace
from orchestrator.services.context import Context
from orchestrator.services.dataset_files import write_release
from tests.conftest import require_root, require_tools
from tests.integration.conftest import Api
from tests.integration.test_dataset import build, files, finished_campaign
from tests.integration.test_dataset_api import wait_idle

#: The tmpfs first mounted: room for a key, not for a release's two dozen files.
SMALL = "64k"


def _mount(where: Path, size: str) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                   check=True)


@pytest.fixture
def release_disk(api: Api) -> Iterator[Path]:
    """A small tmpfs over the releases' folder."""
    require_root("mounting a small tmpfs")
    require_tools("mount", "umount")
    mnt = api.settings.datasets.dir
    mnt.mkdir(parents=True, exist_ok=True)
    _mount(mnt, SMALL)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _limits(api: Api, monkeypatch: pytest.MonkeyPatch, **update: int) -> None:
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    monkeypatch.setattr(ctx, "settings", ctx.settings.model_copy(update={
        "datasets": ctx.settings.datasets.model_copy(update=update)}))


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the disk's matter
def test_a_release_that_does_not_fit_is_refused_and_leaves_nothing_behind(
        api: Api, release_disk: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    campaign = finished_campaign(api, tmp_path)
    archived = files(api.settings.archive_dir)
    post = "/api/v1/datasets"
    body = {"campaigns": [campaign], "raw": True, "key": "k1"}

    # a disk already inside its reserve: refused at once, nothing recorded or made
    _limits(api, monkeypatch, reserve_bytes=1 << 20)
    r = api.client.post(post, headers=api.admin, json=body)
    assert r.status_code == 507, r.text
    said = r.json()["detail"]
    assert "TESTBED_DATASETS__RESERVE_BYTES" in said and "free space" in said, said
    assert api.client.get(post, headers=api.admin).json() == []
    assert not (api.settings.datasets.keys_dir / "k1.key").exists()

    # room to start, not for the release: the job stops before its first file
    _limits(api, monkeypatch, reserve_bytes=0)
    r = api.client.post(post, headers=api.admin, json=body)
    assert r.status_code == 202, r.text
    failed = wait_idle(api, r.json()["id"])
    assert failed["state"] == "failed", failed
    assert "the release needs" in failed["error"] and "free space" in failed["error"], failed
    assert "without raw files" in failed["error"], failed
    assert list(release_disk.iterdir()) == []  # no partial release

    # room on the disk, but over the largest release a build writes
    subprocess.run(["mount", "-o", "remount,size=16m", str(release_disk)], check=True)
    _limits(api, monkeypatch, reserve_bytes=0, max_release_bytes=10_000)
    r = api.client.post(post, headers=api.admin, json=body)
    assert r.status_code == 202, r.text
    failed = wait_idle(api, r.json()["id"])
    assert failed["state"] == "failed", failed
    assert "TESTBED_DATASETS__MAX_RELEASE_BYTES" in failed["error"], failed
    assert list(release_disk.iterdir()) == []

    # with room, the same request builds the release; nothing was lost meanwhile
    _limits(api, monkeypatch, reserve_bytes=0, max_release_bytes=1 << 30)
    r = api.client.post(post, headers=api.admin, json=body)
    ready = wait_idle(api, r.json()["id"])
    assert ready["state"] == "ready" and ready["problems"] == [], ready
    assert [p.name for p in release_disk.iterdir()] == [ready["id"]]
    assert files(api.settings.archive_dir) == archived

    # the CLI: the same refusal on the command line, no folder left
    subprocess.run(["mount", "-o", f"remount,size={SMALL}", str(release_disk)], check=False)
    monkeypatch.setenv("TESTBED_DATASETS__RESERVE_BYTES", "0")
    out = tmp_path / "small" / "r1"
    (tmp_path / "small").mkdir()
    _mount(tmp_path / "small", SMALL)
    try:
        said_cli = build(api, monkeypatch, "build", campaign, "--raw", "--out", str(out),
                         "--key-file", str(tmp_path / "r1.key"))
        assert said_cli.exit_code == 1, said_cli.output
        assert "the release needs" in said_cli.output, said_cli.output
        assert not out.exists()
    finally:
        subprocess.run(["umount", "-l", str(tmp_path / "small")], check=False)


def test_a_disk_that_fills_while_a_release_is_written_keeps_no_part_of_it(
        tmp_path: Path) -> None:
    """The disk full half-way (another writer took the space after the check): the
    write stops with NoSpace saying what to do, and the folder is as it was."""
    require_root("mounting a small tmpfs")
    require_tools("mount", "umount")
    disk = tmp_path / "disk"
    disk.mkdir()
    _mount(disk, SMALL)
    try:
        release = Release(name="mbb-testbed-c-1", version="1.0.0", campaigns=("c-1",),
                          period_from=date(2026, 11, 22), period_to=date(2026, 11, 23))
        big = {"raw/r-1/results/big.log": b"x" * (256 * 1024)}
        for out, existed in ((disk / "new", False), (disk / "empty", True)):
            if existed:
                out.mkdir()
            with pytest.raises(NoSpace, match="the disk filled while the release was "
                               "written.*free space there"):
                write_release(out, release, {}, big, previous=None)
            assert out.exists() == existed and (not existed or list(out.iterdir()) == [])
        assert [p.name for p in disk.iterdir()] == ["empty"]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
