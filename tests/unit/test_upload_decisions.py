"""Which uploads the orchestrator takes (pure decisions) and how a part file holds the
bytes (the archive adapter on a temporary directory)."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.archive.store import Archive, OffsetMismatch, StorageError
from orchestrator.model.uploads import bundle_refusal, node_cap_refusal, ran_after_cancel
from orchestrator.settings import UploadSettings
from testbed_common.states import RunState

S = RunState


@pytest.mark.parametrize(("state", "history"), [
    (S.RUNNING, [S.SCHEDULED, S.ASSIGNED, S.RUNNING]),
    (S.UPLOADING, [S.SCHEDULED, S.ASSIGNED, S.RUNNING, S.UPLOADING]),
    (S.DONE, [S.SCHEDULED, S.ASSIGNED, S.RUNNING, S.UPLOADING, S.DONE]),
    (S.FAILED, [S.SCHEDULED, S.ASSIGNED, S.DEPLOYING, S.FAILED]),  # its logs
    (S.FAILED, [S.SCHEDULED, S.ASSIGNED, S.RUNNING, S.FAILED]),  # agent restarted
    # its node fell silent, may have finished offline and sends its spool when back
    (S.UNREACHABLE, [S.SCHEDULED, S.ASSIGNED, S.DEPLOYING, S.UNREACHABLE]),
    (S.FAILED, [S.SCHEDULED, S.ASSIGNED, S.RUNNING, S.UNREACHABLE, S.FAILED]),  # horizon
    (S.CANCELLED, [S.SCHEDULED, S.ASSIGNED, S.RUNNING, S.CANCELLED]),
    # handed out, then cancelled while its node was offline: it may have run there
    (S.CANCELLED, [S.SCHEDULED, S.ASSIGNED, S.CANCELLED]),
    (S.CANCELLED, [S.SCHEDULED, S.ASSIGNED, S.UNREACHABLE, S.CANCELLED]),
    # an assigned run that fell due while its node was offline
    (S.UNREACHABLE, [S.SCHEDULED, S.ASSIGNED, S.UNREACHABLE]),
])
def test_bundles_are_taken_for_runs_their_node_took_up(
    state: RunState, history: list[RunState]
) -> None:
    assert bundle_refusal("r-1", state, history) is None


@pytest.mark.parametrize(("state", "history", "words"), [
    (S.SCHEDULED, [S.SCHEDULED], "scheduled: it has not run yet"),
    (S.ASSIGNED, [S.SCHEDULED, S.ASSIGNED], "assigned: it has not run yet"),
    (S.DEPLOYING, [S.SCHEDULED, S.ASSIGNED, S.DEPLOYING], "deploying: it has not run yet"),
    (S.CANCELLED, [S.SCHEDULED, S.CANCELLED], "cancelled and never started"),  # not handed out
    (S.EXPIRED, [S.SCHEDULED, S.ASSIGNED, S.EXPIRED], "expired and never started"),
    (S.FAILED, [S.SCHEDULED, S.FAILED], "failed and never started"),
])
def test_bundles_for_runs_that_never_ran_are_refused_naming_the_state(
    state: RunState, history: list[RunState], words: str
) -> None:
    refusal = bundle_refusal("r-1", state, history)
    assert refusal is not None and words in refusal


@pytest.mark.parametrize(("state", "history", "after_cancel"), [
    (S.CANCELLED, [S.SCHEDULED, S.ASSIGNED, S.CANCELLED], True),
    (S.CANCELLED, [S.SCHEDULED, S.ASSIGNED, S.UNREACHABLE, S.CANCELLED], True),
    (S.CANCELLED, [S.SCHEDULED, S.CANCELLED], False),  # the node never held it
    # taken up, then cancelled: a late bundle of a run that stays cancelled
    (S.CANCELLED, [S.SCHEDULED, S.ASSIGNED, S.RUNNING, S.CANCELLED], False),
    (S.EXPIRED, [S.SCHEDULED, S.ASSIGNED, S.EXPIRED], False),  # the node said it missed it
])
def test_a_bundle_of_a_run_cancelled_while_its_node_held_it_means_it_ran_offline(
        state: RunState, history: list[RunState], after_cancel: bool) -> None:
    assert ran_after_cancel(state, history) is after_cancel


def test_node_cap_counts_other_uploads_and_says_what_to_do() -> None:
    assert node_cap_refusal(node_id="se-01", held_elsewhere=400, held_after=600,
                            cap=1000) is None
    refusal = node_cap_refusal(node_id="se-01", held_elsewhere=401, held_after=600, cap=1000)
    assert refusal is not None
    assert "1001 bytes" in refusal and "401 in other runs'" in refusal
    assert "retry later" in refusal


def test_node_cap_below_the_largest_bundle_is_refused() -> None:
    with pytest.raises(ValidationError, match="max_part_bytes_per_node"):
        UploadSettings(max_bundle_bytes=1000, max_part_bytes_per_node=999)


# -- the part file is the offset ---------------------------------------------------------


@pytest.fixture
def archive(tmp_path: Path) -> Archive:
    a = Archive(tmp_path / "archive", tmp_path / "uploads")
    a.prepare()
    return a


def test_part_size_is_the_offset_and_chunks_go_only_where_it_ends(archive: Archive) -> None:
    assert archive.part_size("r-1") == 0
    assert archive.append_part("r-1", offset=0, data=b"abc") == 3
    assert archive.append_part("r-1", offset=3, data=b"de") == 5
    with pytest.raises(OffsetMismatch, match="at offset 5, not 3") as info:
        archive.append_part("r-1", offset=3, data=b"XX")
    assert info.value.held == 5
    assert archive.part_path("r-1").read_bytes() == b"abcde"
    assert archive.reset_part("r-1") == 5
    assert archive.part_size("r-1") == 0 and archive.reset_part("r-1") == 0


def test_a_write_the_disk_refuses_halfway_is_cut_back(
    archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC after part of the chunk reached the file: none of it counts as held.
    (tests/integration/test_api_upload_drift.py does this on a real full tmpfs.)"""
    archive.append_part("r-1", offset=0, data=b"held")
    real_pwrite = os.pwrite
    calls = []

    def pwrite(fd: int, data: Any, offset: int) -> int:
        calls.append(offset)
        if len(calls) == 1:
            return real_pwrite(fd, bytes(data[:3]), offset)  # a short write ...
        raise OSError(errno.ENOSPC, "No space left on device")  # ... then a full disk

    monkeypatch.setattr(os, "pwrite", pwrite)
    with pytest.raises(StorageError, match="No space left on device; free space"):
        archive.append_part("r-1", offset=4, data=b"lost bytes")
    assert calls == [4, 7]
    monkeypatch.undo()
    assert archive.part_size("r-1") == 4
    assert archive.part_path("r-1").read_bytes() == b"held"


def test_a_reset_while_a_chunk_waits_for_the_lock_is_not_undone(archive: Archive) -> None:
    """A writer that opened the part just before a reset removed it must not write into
    the removed file, where its bytes would be reported as held and then vanish."""
    archive.append_part("r-1", offset=0, data=b"abc")
    path = archive.part_path("r-1")
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a reset holds the lock ...
    errors: list[OffsetMismatch] = []

    def late_chunk() -> None:
        try:
            archive.append_part("r-1", offset=3, data=b"def")
        except OffsetMismatch as e:
            errors.append(e)

    writer = threading.Thread(target=late_chunk)
    writer.start()
    writer.join(0.3)  # ... while the chunk waits for it
    assert writer.is_alive()
    path.unlink()  # the reset removes the part and lets go
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
    writer.join(5)
    assert [e.held for e in errors] == [0]  # told to start over, not "6 held"
    assert archive.part_size("r-1") == 0
