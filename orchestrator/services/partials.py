"""Bytes held in unfinished uploads: counted against their node, and expired when idle.

A part file is the only record of what an upload holds (its size is the offset), so
both the per-node count and the expiry read the files; the database says which
uploads are unfinished (their run does not hold the bundle they declared) and when
each last received a chunk.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.orm import Session

from orchestrator.errors import OverCapacity
from orchestrator.model.uploads import node_cap_refusal
from orchestrator.services.context import Context
from orchestrator.store.tables import Run, Upload

log = logging.getLogger(__name__)


def _unfinished() -> ColumnElement[bool]:
    return or_(Run.bundle_sha256.is_(None), Run.bundle_sha256 != Upload.sha256)


def check_node_cap(ctx: Context, s: Session, *, node_id: str, run_id: str, held_after: int) -> None:
    """Refuse (507, retry later) a chunk that would put the node over its cap of bytes
    held in unfinished uploads, counting this upload at ``held_after`` bytes."""
    others = s.scalars(
        select(Upload.run_id)
        .join(Run, Run.id == Upload.run_id)
        .where(Run.node_id == node_id, Upload.run_id != run_id, _unfinished())
    ).all()
    refusal = node_cap_refusal(
        node_id=node_id,
        held_elsewhere=sum(ctx.archive.part_size(other) for other in others),
        held_after=held_after,
        cap=ctx.settings.uploads.max_part_bytes_per_node,
    )
    if refusal is not None:
        raise OverCapacity(refusal)


def expire_idle_parts(ctx: Context) -> int:
    """Drop the bytes of unfinished uploads with no chunk for ``part_idle_expire_s``;
    returns how many bytes were freed. The upload stays declared with nothing held, so
    an agent that comes back is told offset 0 and sends its bundle again."""
    idle = timedelta(seconds=ctx.settings.uploads.part_idle_expire_s)
    cutoff = ctx.clock.now() - idle
    with ctx.db.session() as s:
        run_ids = s.scalars(
            select(Upload.run_id)
            .join(Run, Run.id == Upload.run_id)
            .where(Upload.updated_at < cutoff, _unfinished())
        ).all()
    freed = 0
    for run_id in run_ids:
        dropped = ctx.archive.reset_part(run_id)
        if dropped:
            log.info(
                "upload of run %s: dropped %d bytes, idle over %.1f days",
                run_id,
                dropped,
                idle.total_seconds() / 86400,
            )
        freed += dropped
    return freed
