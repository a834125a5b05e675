"""The fault-injection hook: inert until armed, then damages exactly one chunk."""

from __future__ import annotations

from pathlib import Path

from node_agent.faults import DAMAGE_NEXT_CHUNK, FaultyUploads
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
