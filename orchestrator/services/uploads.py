"""Resumable, idempotent bundle uploads (a small tus-like protocol).

The agent declares size and SHA-256, then sends chunks at the offset the orchestrator
says it holds; a cut connection resumes where the bytes stopped. When the last byte
arrives the whole bundle is hashed, inspected (no traversal, links or bombs; manifest
checksums match) and archived; a bundle already archived for the run is never stored
again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from orchestrator.errors import Conflict, Invalid, NotFound, TooLarge
from orchestrator.services.auth import authenticate_node
from orchestrator.services.context import Context
from orchestrator.services.results import rate_in_bundle
from orchestrator.services.runs import transition
from orchestrator.store.tables import Bundle, Node, Run, RunEvent, Upload
from testbed_common import wire
from testbed_common.bundle import BundleError, BundleLimits, inspect_bundle_file
from testbed_common.states import RunState

log = logging.getLogger(__name__)


def _run_of_node(s: Session, node: Node, run_id: str) -> Run:
    run = s.get(Run, run_id)
    if run is None or run.node_id != node.id:
        raise NotFound(f"node {node.id!r} holds no run {run_id!r}")
    return run


def _status(run_id: str, up: Upload) -> wire.UploadStatus:
    return wire.UploadStatus(
        run_id=run_id, size=up.size, sha256=up.sha256, offset=up.offset, complete=up.complete
    )


def create_upload(
    ctx: Context, token: str | None, run_id: str, body: wire.UploadCreate
) -> wire.UploadStatus:
    limit = ctx.settings.uploads.max_bundle_bytes
    with ctx.db.session() as s:
        node = authenticate_node(s, token)
        run = _run_of_node(s, node, run_id)
        if run.bundle_sha256 is not None:
            if run.bundle_sha256 != body.sha256:
                raise Conflict(
                    f"run {run_id} already has an archived bundle ({run.bundle_sha256[:12]}); "
                    "a different one cannot replace it"
                )
            return wire.UploadStatus(
                run_id=run_id, size=body.size, sha256=body.sha256, offset=body.size, complete=True
            )
        if body.size > limit:
            raise TooLarge(
                f"bundle of {body.size} bytes is over the {limit}-byte limit; capture less "
                "(shorter snap length) or raise TESTBED_UPLOADS__MAX_BUNDLE_BYTES"
            )
        now = ctx.clock.now()
        up = s.get(Upload, run_id)
        if up is None or up.sha256 != body.sha256 or up.size != body.size:
            if up is None:
                up = Upload(run_id=run_id, created_at=now, size=body.size, sha256=body.sha256)
                s.add(up)
            ctx.archive.reset_part(run_id)
            up.size, up.sha256, up.offset, up.complete = body.size, body.sha256, 0, False
            up.updated_at = now
        return _status(run_id, up)


def upload_status(ctx: Context, token: str | None, run_id: str) -> wire.UploadStatus:
    with ctx.db.session() as s:
        node = authenticate_node(s, token)
        run = _run_of_node(s, node, run_id)
        up = s.get(Upload, run_id)
        if up is None:
            raise NotFound(f"no upload started for run {run_id}; POST its size and sha256")
        if run.bundle_sha256 == up.sha256:
            up.complete = True
        return _status(run_id, up)


def append_chunk(
    ctx: Context, token: str | None, run_id: str, offset: int, data: bytes
) -> wire.UploadStatus:
    if len(data) > ctx.settings.uploads.max_chunk_bytes:
        raise TooLarge(
            f"chunk of {len(data)} bytes is over {ctx.settings.uploads.max_chunk_bytes}; "
            "send smaller chunks"
        )
    with ctx.db.session() as s:
        node = authenticate_node(s, token)
        run = _run_of_node(s, node, run_id)
        up = s.get(Upload, run_id)
        if up is None:
            raise NotFound(f"no upload started for run {run_id}; POST its size and sha256")
        if up.complete:
            return _status(run_id, up)
        if offset != up.offset:
            raise Conflict(
                f"upload of run {run_id} is at offset {up.offset}, not {offset}; resume there",
                offset=up.offset,
            )
        if offset + len(data) > up.size:
            raise Invalid(f"chunk ends at {offset + len(data)}, past the declared size {up.size}")
        ctx.archive.write_part(run_id, offset, data)
        up.offset = offset + len(data)
        up.bytes_received += len(data)
        up.updated_at = ctx.clock.now()
        if up.offset == up.size:
            _finalize(ctx, s, run, up)
        return _status(run_id, up)


def _finalize(ctx: Context, s: Session, run: Run, up: Upload) -> None:
    size, digest = ctx.archive.part_digest(run.id)
    if digest != up.sha256 or size != up.size:
        ctx.archive.reset_part(run.id)
        up.offset = 0
        raise Invalid(
            f"bundle for run {run.id} hashed to {digest[:12]}, not the declared "
            f"{up.sha256[:12]}: corrupted in transit; upload it again from offset 0"
        )
    run_id = run.id  # for the hooks below: the row's attributes expire on commit
    part = ctx.archive.part_path(run_id)
    try:
        contents = inspect_bundle_file(part, bundle_limits(ctx))
    except BundleError as e:
        raise _refuse(ctx, s, run, up, f"bundle for run {run.id} refused: {e}") from e
    if contents.run_id != run.id or contents.node_id != run.node_id:
        raise _refuse(ctx, s, run, up, (
            f"bundle manifest names run {contents.run_id!r} on node {contents.node_id!r}, "
            f"but it was uploaded for run {run.id} on {run.node_id}"
        ))
    rate = rate_in_bundle(ctx, run.experiment, part)  # read before anything is archived
    bundle = s.get(Bundle, up.sha256)
    now = ctx.clock.now()
    if bundle is None:
        run_dir = ctx.archive.run_dir(campaign=run.campaign_id, node=run.node_id, run_id=run.id)
        path = ctx.archive.store_bundle(
            run_dir, source=part, sha256=up.sha256, manifest=contents.manifest
        )
        _after_transaction(s, committed=lambda: ctx.archive.reset_part(run_id),
                           rolled_back=lambda: ctx.archive.discard_bundle(run_dir))
        bundle = Bundle(
            sha256=up.sha256,
            size=up.size,
            path=ctx.archive.relative(path),
            files=len(contents.files),
            stored_at=now,
        )
        s.add(bundle)
        s.flush()
    else:
        _after_transaction(s, committed=lambda: ctx.archive.reset_part(run_id))
    run.bundle_sha256 = bundle.sha256
    run.measured_rate_bps = rate
    up.complete = True
    note = (
        f"bundle {bundle.sha256[:12]} verified and archived ({len(contents.files)} files, "
        f"{up.size} bytes)"
    )
    state = RunState(run.state)
    if state in (RunState.UPLOADING, RunState.RUNNING):
        if state == RunState.RUNNING:
            transition(s, run, RunState.UPLOADING, "bundle arrived", source="orchestrator", at=now)
        transition(s, run, RunState.DONE, note, source="orchestrator", at=now)
    else:  # a failed run's logs, or a late bundle: kept, state unchanged
        s.add(RunEvent(run_id=run.id, state=run.state, reason=note, source="orchestrator", at=now))


def bundle_limits(ctx: Context) -> BundleLimits:
    return BundleLimits(max_unpacked_bytes=ctx.settings.uploads.max_unpacked_bytes)


def _after_transaction(
    s: Session, *, committed: Callable[[], None] | None = None,
    rolled_back: Callable[[], None] | None = None,
) -> None:
    """Run ``committed`` once the request's transaction commits, or ``rolled_back``
    once it rolls back (whatever raised, the commit included). Files follow the rows:
    the archived bundle is removed when its row is not committed, and the uploaded part
    is removed only when it is."""
    settled = False

    def on(action: Callable[[], None] | None) -> Callable[[Session], None]:
        def handler(_: Session) -> None:
            nonlocal settled
            if not settled:
                settled = True
                if action is not None:
                    action()
        return handler

    event.listen(s, "after_commit", on(committed), once=True)
    event.listen(s, "after_rollback", on(rolled_back), once=True)


def _refuse(ctx: Context, s: Session, run: Run, up: Upload, reason: str) -> Invalid:
    """The error refusing a bundle that passed its checksum but not inspection. The
    part is dropped (the agent keeps its copy), and the reason is written on the run
    once the request's transaction has rolled back (in a transaction of its own, so
    that the refusal does not undo it)."""
    ctx.archive.reset_part(run.id)
    up.offset = 0
    run_id = run.id

    def record() -> None:
        try:
            with ctx.db.session() as fresh:
                target = fresh.get(Run, run_id)
                if target is not None:
                    fresh.add(RunEvent(run_id=run_id, state=target.state, reason=reason,
                                       source="orchestrator", at=ctx.clock.now()))
        except SQLAlchemyError as e:  # the 422 still tells the node why
            log.warning("run %s: refusal not recorded (%s): %s", run_id, e, reason)

    _after_transaction(s, rolled_back=record)
    return Invalid(reason)
