"""Resumable upload of one spooled bundle: ask the orchestrator where it stands, then
send chunks from that offset on. Interrupted uploads resume where the orchestrator's
copy ends (tus-like), so a flaky 3G link never re-sends what already arrived.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Protocol

from node_agent.errors import NotFound, OffsetMismatch, Rejected
from node_agent.spool import Spool, SpooledBundle
from testbed_common import wire

log = logging.getLogger(__name__)

#: Offset corrections accepted in a row before the upload is retried later.
MAX_OFFSET_RESYNCS = 5


class UploadApi(Protocol):
    def create_upload(self, run_id: str, body: wire.UploadCreate) -> wire.UploadStatus: ...

    def append_chunk(self, run_id: str, offset: int, data: bytes) -> wire.UploadStatus: ...


class UploadResult(StrEnum):
    DONE = "done"  # the orchestrator holds the bundle; removed from the spool
    REJECTED = "rejected"  # refused for good; moved to rejected/
    RETRY = "retry"  # try again later (the caller handles OrchestratorUnreachable)


def upload(api: UploadApi, spool: Spool, item: SpooledBundle, *, chunk_bytes: int) -> UploadResult:
    """Upload ``item`` from wherever the orchestrator's copy ends.

    Raises OrchestratorUnreachable (and Unauthorized) for the caller to retry later.
    """
    try:
        status = api.create_upload(
            item.run_id, wire.UploadCreate(size=item.size, sha256=item.sha256)
        )
    except (Rejected, NotFound) as e:
        reason = f"orchestrator refused the bundle of run {item.run_id}: {e}"
        log.error("%s; kept in %s", reason, spool.reject(item, reason))
        return UploadResult.REJECTED
    resyncs = 0
    with item.path.open("rb") as f:
        while not status.complete:
            offset = status.offset
            if not 0 <= offset < item.size:
                log.warning(
                    "run %s: orchestrator offset %d outside the bundle", item.run_id, offset
                )
                return UploadResult.RETRY
            f.seek(offset)
            chunk = f.read(chunk_bytes)
            try:
                status = api.append_chunk(item.run_id, offset, chunk)
                resyncs = 0
            except OffsetMismatch as e:
                resyncs += 1
                if resyncs > MAX_OFFSET_RESYNCS:
                    return UploadResult.RETRY
                log.info("run %s: resuming upload at %d (%s)", item.run_id, e.offset, e)
                status = status.model_copy(update={"offset": e.offset})
            except (Rejected, NotFound) as e:
                reason = f"orchestrator refused the bundle of run {item.run_id}: {e}"
                log.error("%s; kept in %s", reason, spool.reject(item, reason))
                return UploadResult.REJECTED
    spool.done(item)
    log.info("run %s: bundle uploaded (%d bytes)", item.run_id, item.size)
    return UploadResult.DONE
