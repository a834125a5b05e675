"""Resumable upload of one spooled bundle: ask the orchestrator where it stands, then
send chunks from that offset on. Interrupted uploads resume where the orchestrator's
copy ends (tus-like), so a flaky 3G link never re-sends what already arrived.

Two refusals differ (the orchestrator says which in the 422's ``fault``): bytes damaged
in transit are sent again from offset 0, a few times per pass; a bundle inspection
refuses (traversal, links, a bomb, a manifest for another run) is kept in
``rejected/`` and never sent again.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Protocol

from node_agent.errors import Corrupted, NotFound, OffsetMismatch, Rejected
from node_agent.spool import Spool, SpooledBundle
from testbed_common import wire
from testbed_common.bundle import sha256_file

log = logging.getLogger(__name__)

#: Offset corrections accepted in a row before the upload is retried later.
MAX_OFFSET_RESYNCS = 5
#: Times one pass sends a bundle again from offset 0 after the orchestrator found it
#: damaged in transit; past it the bundle waits for the next pass (a link that damages
#: every try should not burn the SIM's data in a loop).
MAX_RESTARTS = 3


class UploadApi(Protocol):
    def create_upload(self, run_id: str, body: wire.UploadCreate) -> wire.UploadStatus: ...

    def append_chunk(self, run_id: str, offset: int, data: bytes) -> wire.UploadStatus: ...


class UploadResult(StrEnum):
    DONE = "done"  # the orchestrator holds the bundle; removed from the spool
    REJECTED = "rejected"  # refused for good; moved to rejected/
    RETRY = "retry"  # try again later (the caller handles OrchestratorUnreachable)


def upload(api: UploadApi, spool: Spool, item: SpooledBundle, *, chunk_bytes: int) -> UploadResult:
    """Upload ``item`` from wherever the orchestrator's copy ends; start over from 0
    when it arrived damaged, up to :data:`MAX_RESTARTS` times.

    Raises OrchestratorUnreachable (and Unauthorized) for the caller to retry later.
    """
    for restart in range(MAX_RESTARTS + 1):
        try:
            return _send(api, spool, item, chunk_bytes=chunk_bytes)
        except Corrupted as e:
            if sha256_file(item.path) != item.sha256:
                # Not the link: the node's own copy changed since it was spooled, so no
                # resend can ever match. Kept aside with the reason, never deleted.
                reason = (f"bundle of run {item.run_id} no longer matches the SHA-256 it "
                          f"was spooled with (disk damage on the node): {e}")
                log.error("%s; kept in %s", reason, spool.reject(item, reason))
                return UploadResult.REJECTED
            log.warning("run %s: %s; sending it again from offset 0 (%d of %d)",
                        item.run_id, e, restart + 1, MAX_RESTARTS)
    log.warning("run %s: bundle damaged in transit %d times in a row; trying again later",
                item.run_id, MAX_RESTARTS + 1)
    return UploadResult.RETRY


def _send(api: UploadApi, spool: Spool, item: SpooledBundle, *, chunk_bytes: int) -> UploadResult:
    """One try: declare the bundle, then send chunks from the orchestrator's offset.
    Raises Corrupted when the orchestrator found the bytes damaged (and dropped them)."""
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
