"""The fault-injection hooks: inert until armed; one damages exactly one chunk, the
other stalls a bundle at a point until let go; a new life of the agent disarms both."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.errors import OrchestratorUnreachable
from node_agent.faults import (
    DAMAGE_NEXT_CHUNK,
    STALL_UPLOAD,
    FaultyUploads,
    disarm_all,
    stall_point,
)
from testbed_common import wire


class Recorder:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def create_upload(self, run_id: str, body: wire.UploadCreate) -> wire.UploadStatus:
        return wire.UploadStatus(run_id=run_id, size=body.size, sha256=body.sha256,
                                 offset=0, complete=False)

    def append_chunk(self, run_id: str, offset: int, data: bytes) -> wire.UploadStatus:
        self.chunks.append(data)
        return wire.UploadStatus(run_id=run_id, size=8, sha256="0" * 64,
                                 offset=offset + len(data), complete=False)


def test_unarmed_hook_passes_chunks_unchanged(tmp_path: Path) -> None:
    api = Recorder()
    FaultyUploads(api, tmp_path / "faults").append_chunk("r1", 0, b"abcd")
    assert api.chunks == [b"abcd"]


def test_armed_hook_flips_the_last_byte_of_one_chunk_then_disarms(tmp_path: Path) -> None:
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / DAMAGE_NEXT_CHUNK).touch()
    api = Recorder()
    hooked = FaultyUploads(api, faults)
    hooked.append_chunk("r1", 0, b"abcd")
    hooked.append_chunk("r1", 0, b"abcd")
    assert api.chunks == [b"abc" + bytes([ord("d") ^ 0xFF]), b"abcd"]
    assert not (faults / DAMAGE_NEXT_CHUNK).exists()


def _declared(hooked: FaultyUploads, size: int) -> None:
    hooked.create_upload("r1", wire.UploadCreate(size=size, sha256="0" * 64))


def test_stall_cuts_the_chunk_at_the_point_then_fails_like_a_dead_link(tmp_path: Path) -> None:
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / STALL_UPLOAD).write_text("0.5\n")
    api = Recorder()
    hooked = FaultyUploads(api, faults)
    _declared(hooked, 8)
    status = hooked.append_chunk("r1", 0, b"abcdef")
    assert api.chunks == [b"abcd"] and status.offset == 4  # half of 8 bytes, no more
    with pytest.raises(OrchestratorUnreachable, match="stalled at byte 4 of 8"):
        hooked.append_chunk("r1", 4, b"efgh")
    (faults / STALL_UPLOAD).unlink()  # let go: the rest follows from the part's end
    hooked.append_chunk("r1", 4, b"efgh")
    assert api.chunks == [b"abcd", b"efgh"]


def test_stall_at_zero_sends_nothing_and_an_empty_file_means_half(tmp_path: Path) -> None:
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / STALL_UPLOAD).write_text("0")
    api = Recorder()
    hooked = FaultyUploads(api, faults)
    _declared(hooked, 8)
    with pytest.raises(OrchestratorUnreachable):
        hooked.append_chunk("r1", 0, b"abcdefgh")
    assert api.chunks == []
    assert stall_point("", 10) == 5
    with pytest.raises(ValueError, match=r"fraction in \[0, 1\)"):
        stall_point("1.5", 10)


def test_a_new_life_disarms_what_an_earlier_one_left(tmp_path: Path) -> None:
    faults = tmp_path / "faults"
    assert disarm_all(faults) == []  # none armed, no folder: nothing to do
    faults.mkdir()
    (faults / STALL_UPLOAD).write_text("0.5")
    (faults / DAMAGE_NEXT_CHUNK).touch()
    assert disarm_all(faults) == [DAMAGE_NEXT_CHUNK, STALL_UPLOAD]
    assert list(faults.iterdir()) == []
