"""Spool, outbox and resumable upload on a temporary state directory."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from node_agent.errors import Corrupted, OffsetMismatch, OrchestratorUnreachable, Rejected
from node_agent.outbox import Outbox
from node_agent.sender import send_pending
from node_agent.spool import Spool
from node_agent.uploader import MAX_RESTARTS, UploadResult, upload
from testbed_common import wire
from testbed_common.bundle import sha256_bytes
from testbed_common.states import RunState

NOW = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)


class FakeUploads:
    """An in-memory orchestrator upload endpoint (unit tests of the resume logic only;
    tests/integration exercises the real one)."""

    def __init__(self, *, have: bytes = b"", fail_after: int | None = None,
                 reject: bool = False, lie_offset: int | None = None,
                 damage: int = 0) -> None:
        self.data = have
        self.damage = damage  # uploads to damage in transit, one byte each
        self.fail_after = fail_after
        self.reject = reject
        self.lie_offset = lie_offset
        self.chunks: list[tuple[int, int]] = []
        self.size = 0
        self.sha = ""

    def _status(self, run_id: str) -> wire.UploadStatus:
        return wire.UploadStatus(run_id=run_id, size=self.size, sha256=self.sha,
                                 offset=len(self.data), complete=len(self.data) == self.size)

    def create_upload(self, run_id: str, body: wire.UploadCreate) -> wire.UploadStatus:
        self.size, self.sha = body.size, body.sha256
        status = self._status(run_id)
        if self.lie_offset is not None:
            status = status.model_copy(update={"offset": self.lie_offset})
            self.lie_offset = None
        return status

    def append_chunk(self, run_id: str, offset: int, data: bytes) -> wire.UploadStatus:
        if self.fail_after is not None and len(self.chunks) >= self.fail_after:
            raise OrchestratorUnreachable("link down")
        if offset != len(self.data):
            raise OffsetMismatch("mismatch", len(self.data))
        self.chunks.append((offset, len(data)))
        self.data += data
        if len(self.data) == self.size and self.damage:
            self.damage -= 1
            self.data = b""  # the orchestrator drops what it held
            raise Corrupted("corrupted in transit; upload it again from offset 0")
        if len(self.data) == self.size and self.reject:
            raise Rejected("bundle failed verification", 422)
        return self._status(run_id)


def test_spool_put_pending_done(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    item = spool.put("r-1", b"bundle-bytes")
    assert item.sha256 == sha256_bytes(b"bundle-bytes") and item.size == 12
    assert [i.run_id for i in Spool(tmp_path / "spool").pending()] == ["r-1"]  # restart
    spool.done(item)
    assert spool.pending() == [] and len(spool) == 0


def test_upload_in_chunks_and_resume_after_outage(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    data = bytes(range(256)) * 40  # 10240 bytes
    item = spool.put("r-1", data)
    api = FakeUploads(fail_after=3)
    with pytest.raises(OrchestratorUnreachable):
        upload(api, spool, item, chunk_bytes=1000)
    assert len(api.data) == 3000 and spool.pending() == [item]
    api.fail_after = None
    assert upload(api, spool, item, chunk_bytes=1000) is UploadResult.DONE
    assert api.data == data
    assert api.chunks[3] == (3000, 1000)  # resumed where the orchestrator's copy ended
    assert spool.pending() == []


def test_offset_mismatch_resyncs(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    data = b"x" * 5000
    item = spool.put("r-1", data)
    api = FakeUploads(have=b"x" * 2000, lie_offset=0)  # says 0, holds 2000
    assert upload(api, spool, item, chunk_bytes=1000) is UploadResult.DONE
    assert api.data == data


def test_already_complete_upload_is_idempotent(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    item = spool.put("r-1", b"abc")
    api = FakeUploads(have=b"abc")
    assert upload(api, spool, item, chunk_bytes=1000) is UploadResult.DONE
    assert api.chunks == []


def test_rejected_bundle_is_kept(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    item = spool.put("r-1", b"abc")
    assert upload(FakeUploads(reject=True), spool, item, chunk_bytes=2) is UploadResult.REJECTED
    assert spool.pending() == []
    assert (tmp_path / "rejected" / "r-1.tar.gz").read_bytes() == b"abc"
    assert "verification" in (tmp_path / "rejected" / "r-1.reason.txt").read_text()


def test_bundle_damaged_in_transit_is_sent_again_from_zero_not_rejected(
    tmp_path: Path,
) -> None:
    spool = Spool(tmp_path / "spool")
    data = bytes(range(256)) * 10
    item = spool.put("r-1", data)
    api = FakeUploads(damage=1)
    assert upload(api, spool, item, chunk_bytes=1000) is UploadResult.DONE
    assert api.data == data
    assert [o for o, _ in api.chunks] == [0, 1000, 2000, 0, 1000, 2000]
    assert spool.pending() == [] and not spool.rejected_dir.exists()


def test_a_link_that_always_damages_is_tried_a_bounded_number_of_times(
    tmp_path: Path,
) -> None:
    spool = Spool(tmp_path / "spool")
    item = spool.put("r-1", b"x" * 3000)
    api = FakeUploads(damage=100)
    assert upload(api, spool, item, chunk_bytes=1000) is UploadResult.RETRY
    assert len(api.chunks) == 3 * (MAX_RESTARTS + 1)
    assert spool.pending() == [item] and not spool.rejected_dir.exists()  # kept for later


def test_bundle_changed_on_the_nodes_disk_is_kept_aside(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    item = spool.put("r-1", b"x" * 3000)
    item.path.write_bytes(b"y" * 3000)  # bit rot after spooling
    assert upload(FakeUploads(damage=100), spool, item, chunk_bytes=1000) \
        is UploadResult.REJECTED
    reason = (tmp_path / "rejected" / "r-1.reason.txt").read_text()
    assert "no longer matches the SHA-256" in reason


def test_outbox_keeps_order_across_restarts(tmp_path: Path) -> None:
    box = Outbox(tmp_path / "outbox")
    for state in (RunState.DEPLOYING, RunState.RUNNING):
        box.put("r-1", wire.StateReport(state=state, reason="x", at=NOW))
    box.put("r-2", wire.StateReport(state=RunState.FAILED, reason="y", at=NOW))
    again = Outbox(tmp_path / "outbox")
    again.put("r-1", wire.StateReport(state=RunState.UPLOADING, reason="z", at=NOW))
    assert [(i.run_id, i.report.state) for i in again.pending()] == [
        ("r-1", RunState.DEPLOYING), ("r-1", RunState.RUNNING), ("r-2", RunState.FAILED),
        ("r-1", RunState.UPLOADING),
    ]
    again.drop_run("r-1")
    assert again.run_ids() == {"r-2"}


class RecordingUploads(FakeUploads):
    """Accepts every bundle whole and notes the order the runs came in."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []

    def create_upload(self, run_id: str, body: wire.UploadCreate) -> wire.UploadStatus:
        self.order.append(run_id)
        self.data = b""
        return super().create_upload(run_id, body)


def spool_at(spool: Spool, run_id: str, at_s: int) -> None:
    """Spool a bundle as if ``at_s`` (seconds since the epoch) was when it was spooled."""
    spool.put(run_id, run_id.encode() * 100)
    os.utime(spool.root / f"{run_id}.json", ns=(at_s * 10**9, at_s * 10**9))


def test_spooled_bundles_upload_oldest_first(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    # spooled in this order; run ids sort the other way round
    for at_s, run_id in enumerate(["r-z", "r-m", "r-a"], start=1_700_000_000):
        spool_at(spool, run_id, at_s)
    spool_at(spool, "r-b", 1_700_000_002)  # same time as r-a: then by run id
    assert [i.run_id for i in Spool(tmp_path / "spool").pending()] == [
        "r-z", "r-m", "r-a", "r-b"]
    api = RecordingUploads()
    finals: list[str] = []
    assert send_pending(client=None, uploads=api,  # type: ignore[arg-type]
                        outbox=Outbox(tmp_path / "outbox"), spool=spool, chunk_bytes=64,
                        on_final=finals.append)
    assert api.order == ["r-z", "r-m", "r-a", "r-b"]
    assert spool.pending() == [] and finals == []


def test_a_bundle_waits_for_its_state_reports(tmp_path: Path) -> None:
    spool, box = Spool(tmp_path / "spool"), Outbox(tmp_path / "outbox")
    spool_at(spool, "r-1", 1_700_000_000)

    class Offline:
        def report_state(self, run_id: str, report: wire.StateReport) -> None:
            raise OrchestratorUnreachable("link down")

    box.put("r-1", wire.StateReport(state=RunState.UPLOADING, reason="x", at=NOW))
    api = RecordingUploads()
    assert not send_pending(client=Offline(), uploads=api,  # type: ignore[arg-type]
                            outbox=box, spool=spool, chunk_bytes=64, on_final=print)
    assert api.order == [] and [i.run_id for i in spool.pending()] == ["r-1"]


def test_only_a_confirmed_upload_takes_a_bundle_out_of_the_spool(tmp_path: Path) -> None:
    """The spool is never trimmed: an outage, a bundle damaged on every try, a lying
    offset leave every bundle in place; the orchestrator's refusal keeps it in
    rejected/; only the orchestrator's "complete" removes it."""
    spool = Spool(tmp_path / "spool")
    data = {f"r-{i}": os.urandom(3000) for i in range(3)}
    for i, (run_id, payload) in enumerate(data.items()):
        spool.put(run_id, payload)
        os.utime(spool.root / f"{run_id}.json", ns=(i * 10**9, i * 10**9))
    [a, b, c] = spool.pending()
    with pytest.raises(OrchestratorUnreachable):
        upload(FakeUploads(fail_after=1), spool, a, chunk_bytes=1000)
    assert upload(FakeUploads(damage=100), spool, a, chunk_bytes=1000) is UploadResult.RETRY
    assert upload(FakeUploads(lie_offset=5000), spool, b, chunk_bytes=1000) \
        is UploadResult.RETRY
    assert [i.path.read_bytes() for i in spool.pending()] == list(data.values())
    assert upload(FakeUploads(reject=True), spool, b, chunk_bytes=1000) \
        is UploadResult.REJECTED
    assert (spool.rejected_dir / "r-1.tar.gz").read_bytes() == data["r-1"]
    assert upload(FakeUploads(), spool, c, chunk_bytes=1000) is UploadResult.DONE
    assert [i.run_id for i in spool.pending()] == ["r-0"]
    assert a.path.read_bytes() == data["r-0"]


def test_a_bundle_without_its_metadata_is_never_listed(tmp_path: Path) -> None:
    """A put the disk cut short (the bundle written, its metadata not) is not a
    complete bundle: it is not uploaded, and a later put of the run replaces it."""
    spool = Spool(tmp_path / "spool")
    (spool.root / "r-1.tar.gz").write_bytes(b"half")
    (spool.root / "r-2.json").write_text("{not json")
    spool.put("r-3", b"whole")
    assert [i.run_id for i in spool.pending()] == ["r-3"]
    assert (spool.root / "r-1.tar.gz").exists() and (spool.root / "r-2.json").exists()


def test_discarding_a_failed_put_never_removes_a_complete_bundle(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    spool.put("r-1", b"whole")
    (spool.root / "r-2.tar.part").write_bytes(b"ha")  # a put the disk cut short
    (spool.root / "r-2.tar.gz").write_bytes(b"half")  # written, its metadata not
    spool.discard("r-2")
    spool.discard("r-1")
    assert sorted(p.name for p in spool.root.iterdir()) == ["r-1.json", "r-1.tar.gz"]
    assert [i.run_id for i in spool.pending()] == ["r-1"]
