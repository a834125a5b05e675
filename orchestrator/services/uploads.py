"""Resumable, idempotent bundle uploads (a small tus-like protocol).

The agent declares size and SHA-256, then sends chunks at the offset the orchestrator
says it holds; a cut connection resumes where the bytes stopped. The offset is the size
of the part file and nothing else (one truth: what is reported is what is held, so a
rollback, a crash or a full disk cannot make the two disagree). When the last byte
arrives the whole bundle is hashed, inspected (no traversal, links or bombs; manifest
checksums match) and archived; a bundle already archived for the run is never stored
again. Requests of one run's upload are taken one at a time, each with its commit
(:meth:`~orchestrator.archive.store.Archive.upload_lock`): the same bundle sent twice
at once is archived once, and the second sender is told it is complete, or told the
offset to resume from (409). On PostgreSQL that lock is an advisory lock, so it holds
across replicas on different hosts too. A hash mismatch drops the part (a file removal, which no
rollback undoes) and says ``fault: corrupted``: send it all again; a bundle inspection refuses says
``fault: refused``: sending it again cannot help.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from sqlalchemy import event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from orchestrator.archive.store import OffsetMismatch
from orchestrator.errors import Conflict, Invalid, NotFound, TooLarge, UploadFailed
from orchestrator.model.contact import out_of_contact_note, ran_after_cancel_note
from orchestrator.model.uploads import AWAITING, bundle_refusal, ran_after_cancel
from orchestrator.services import quotas
from orchestrator.services.auth import authenticate_node
from orchestrator.services.context import Context
from orchestrator.services.partials import check_node_cap
from orchestrator.services.results import (
    measured_in_bundle,
    members_to_keep,
    rate_in_bundle,
    started_in_bundle,
)
from orchestrator.services.runs import transition
from orchestrator.store import locks
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


def _complete(run: Run, up: Upload) -> bool:
    return run.bundle_sha256 == up.sha256


def _status(ctx: Context, run: Run, up: Upload) -> wire.UploadStatus:
    complete = _complete(run, up)
    return wire.UploadStatus(
        run_id=run.id,
        size=up.size,
        sha256=up.sha256,
        offset=up.size if complete else ctx.archive.part_size(run.id),
        complete=complete,
    )


def _history(s: Session, run: Run) -> frozenset[RunState]:
    return quotas.history_of(s, run)


def _refuse_unless_results_can_exist(s: Session, run: Run) -> None:
    refusal = bundle_refusal(run.id, RunState(run.state), _history(s, run))
    if refusal is not None:
        raise Conflict(refusal, state=run.state)


def _finish_full_part(ctx: Context, s: Session, run: Run, up: Upload) -> None:
    """Verify a part that already holds every byte but was never verified (the process
    stopped between storing the last chunk and committing): the last byte's request
    would have done it."""
    if not _complete(run, up) and ctx.archive.part_size(run.id) >= up.size:
        _finalize(ctx, s, run, up)


def _drop_part_once_committed(ctx: Context, s: Session, status: wire.UploadStatus) -> None:
    """A complete upload's part is dropped only after the run's bundle is committed:
    should the process stop before, the part still holds every byte, and the agent's
    next call verifies it again instead of sending it all once more."""
    if not status.complete:
        return
    run_id = status.run_id

    def drop() -> None:
        ctx.archive.reset_part(run_id)
        ctx.archive.drop_upload_lock(run_id)

    _after_transaction(s, committed=drop)


@contextmanager
def _one_request_at_a_time(ctx: Context, token: str | None, run_id: str) -> Iterator[None]:
    """The run's upload lock, taken only for the node that holds the run (so no caller
    without that node's token makes lock files, nor waits on another node's upload)."""
    with ctx.db.reading() as s:
        _run_of_node(s, authenticate_node(s, token), run_id)
    with _upload_lock(ctx, run_id):
        yield


def _upload_lock(ctx: Context, run_id: str) -> AbstractContextManager[None]:
    """On PostgreSQL an advisory lock keyed by the run, which every replica honours on
    whatever host it runs; on SQLite (one host) the flock on the uploads volume."""
    engine = ctx.db.engine
    if locks.shared_locks(engine):
        return locks.held(engine, locks.upload_lock_name(run_id))
    return ctx.archive.upload_lock(run_id)


def create_upload(
    ctx: Context, token: str | None, run_id: str, body: wire.UploadCreate
) -> wire.UploadStatus:
    with _one_request_at_a_time(ctx, token, run_id):
        with ctx.db.session() as s:
            node = authenticate_node(s, token)
            status = _declare(ctx, s, _run_of_node(s, node, run_id), body)
            _drop_part_once_committed(ctx, s, status)
        return status


def _declare(ctx: Context, s: Session, run: Run, body: wire.UploadCreate) -> wire.UploadStatus:
    if run.bundle_sha256 is not None:
        if run.bundle_sha256 != body.sha256:
            raise Conflict(
                f"run {run.id} already has an archived bundle ({run.bundle_sha256[:12]}); "
                "a different one cannot replace it"
            )
        return wire.UploadStatus(
            run_id=run.id, size=body.size, sha256=body.sha256, offset=body.size, complete=True
        )
    _refuse_unless_results_can_exist(s, run)
    limit = ctx.settings.uploads.max_bundle_bytes
    if body.size > limit:
        raise TooLarge(
            f"bundle of {body.size} bytes is over the {limit}-byte limit; capture less "
            "(shorter snap length) or raise TESTBED_UPLOADS__MAX_BUNDLE_BYTES"
        )
    now = ctx.clock.now()
    up = s.get(Upload, run.id)
    if up is None or up.sha256 != body.sha256 or up.size != body.size:
        if up is None:
            up = Upload(run_id=run.id, created_at=now, size=body.size, sha256=body.sha256)
            s.add(up)
        ctx.archive.reset_part(run.id)
        up.size, up.sha256 = body.size, body.sha256
    up.updated_at = now  # the agent is back: its part is not idle
    _finish_full_part(ctx, s, run, up)
    return _status(ctx, run, up)


def upload_status(ctx: Context, token: str | None, run_id: str) -> wire.UploadStatus:
    with ctx.db.session() as s:
        run, up = _declared_upload(s, token, run_id)
        return _status(ctx, run, up)


def _declared_upload(s: Session, token: str | None, run_id: str) -> tuple[Run, Upload]:
    """The node's run and its declared upload; 404 (declare it first) when there is none."""
    run = _run_of_node(s, authenticate_node(s, token), run_id)
    up = s.get(Upload, run_id)
    if up is None:
        raise NotFound(f"no upload started for run {run_id}; POST its size and sha256")
    return run, up


def append_chunk(
    ctx: Context, token: str | None, run_id: str, offset: int, data: bytes
) -> wire.UploadStatus:
    if len(data) > ctx.settings.uploads.max_chunk_bytes:
        raise TooLarge(
            f"chunk of {len(data)} bytes is over {ctx.settings.uploads.max_chunk_bytes}; "
            "send smaller chunks"
        )
    with _one_request_at_a_time(ctx, token, run_id):
        with ctx.db.session() as s:
            run, up = _declared_upload(s, token, run_id)
            status = _append(ctx, s, run, up, offset=offset, data=data)
            _drop_part_once_committed(ctx, s, status)
        return status


def _append(
    ctx: Context, s: Session, run: Run, up: Upload, *, offset: int, data: bytes
) -> wire.UploadStatus:
    if _complete(run, up):
        return _status(ctx, run, up)
    _refuse_unless_results_can_exist(s, run)  # also for uploads declared before the rule
    _finish_full_part(ctx, s, run, up)
    if _complete(run, up):  # the full part it found is verified and archived
        return _status(ctx, run, up)
    try:
        held = ctx.archive.part_size(run.id)
        if offset != held:  # before any other check; again under the part's lock
            raise OffsetMismatch(run.id, held=held, offset=offset)
        end = offset + len(data)
        if end > up.size:
            raise Invalid(f"chunk ends at {end}, past the declared size {up.size}")
        check_node_cap(ctx, s, node_id=run.node_id, run_id=run.id, held_after=end)
        held = ctx.archive.append_part(run.id, offset=offset, data=data)
    except OffsetMismatch as e:
        raise Conflict(str(e), offset=e.held) from e
    up.bytes_received += len(data)
    up.updated_at = ctx.clock.now()
    if held == up.size:
        _finalize(ctx, s, run, up)
    return _status(ctx, run, up)


def _finalize(ctx: Context, s: Session, run: Run, up: Upload) -> None:
    size, digest = ctx.archive.part_digest(run.id)
    if digest != up.sha256 or size != up.size:
        # Dropping the part is the reset: a file removal, which the rollback of this
        # request's transaction does not undo, and no stored offset contradicts it.
        ctx.archive.reset_part(run.id)
        raise UploadFailed(
            f"bundle for run {run.id} hashed to {digest[:12]}, not the declared "
            f"{up.sha256[:12]}: corrupted in transit; the orchestrator dropped the "
            f"{size} bytes it held: upload it again from offset 0",
            fault=wire.UploadFault.CORRUPTED,
        )
    run_id = run.id  # for the hooks below: the row's attributes expire on commit
    part = ctx.archive.part_path(run_id)
    try:
        contents = inspect_bundle_file(part, bundle_limits(ctx), keep=members_to_keep(
            ctx, run.experiment, metered=run.measured_bytes is not None),
            owner=(run.id, run.node_id))
    except BundleError as e:
        raise _refused(ctx, s, run, f"bundle for run {run.id} refused: {e}") from e
    rate = rate_in_bundle(ctx, run.experiment, contents)
    bundle = s.get(Bundle, up.sha256)
    now = ctx.clock.now()
    if bundle is None:
        run_dir = ctx.archive.run_dir(campaign=run.campaign_id, node=run.node_id, run_id=run.id)
        path = ctx.archive.store_bundle(
            run_dir, source=part, sha256=up.sha256, manifest=contents.manifest
        )
        _after_transaction(s, rolled_back=lambda: ctx.archive.discard_bundle(run_dir))
        bundle = Bundle(
            sha256=up.sha256,
            size=up.size,
            path=ctx.archive.relative(path),
            files=len(contents.files),
            stored_at=now,
        )
        s.add(bundle)
        s.flush()
    run.bundle_sha256 = bundle.sha256
    run.measured_rate_bps = rate
    note = (
        f"bundle {bundle.sha256[:12]} verified and archived ({len(contents.files)} files, "
        f"{up.size} bytes)"
    )
    state = RunState(run.state)
    if state in AWAITING:
        if run.measured_bytes is None:  # its report is late or lost: the bundle's counters
            run.measured_bytes = measured_in_bundle(ctx, contents)
        if state != RunState.UPLOADING:
            transition(s, run, RunState.UPLOADING, "bundle arrived", source="orchestrator", at=now)
        contact = out_of_contact_note(run.node_id, run.out_of_contact_s)
        transition(s, run, RunState.DONE, f"{note}; {contact}" if contact else note,
                   source="orchestrator", at=now)
    elif ran_after_cancel(state, _history(s, run)):
        # Its node held it and ran it offline before it could learn of the cancellation:
        # real results, kept and ingested; the reservation, held since the cancel
        # (model.contact.cancel_holds_reservation), is settled at what the run measured
        # (a run cancelled before that rule, or dropped and run all the same, settled at
        # the cancel or the drop: settled again).
        cancelled_at = run.state_at.isoformat()
        if run.measured_bytes is None:
            run.measured_bytes = measured_in_bundle(ctx, contents)
        run.settled_at = run.charged_bytes = run.overrun_bytes = None
        why = ran_after_cancel_note(run.node_id, ran_at=started_in_bundle(ctx, contents),
                                    cancelled_at=cancelled_at)
        transition(s, run, RunState.DONE, f"{note}; {why}", source="orchestrator", at=now)
    else:  # a failed run's logs, or a late bundle: kept, state unchanged
        s.add(RunEvent(run_id=run.id, state=run.state, reason=note, source="orchestrator", at=now))


def bundle_limits(ctx: Context) -> BundleLimits:
    return BundleLimits(max_unpacked_bytes=ctx.settings.uploads.max_unpacked_bytes)


def _after_transaction(s: Session, *, committed: Callable[[], None] | None = None,
                       rolled_back: Callable[[], None] | None = None) -> None:
    """Run ``committed`` once the request's transaction has committed, or ``rolled_back``
    once it rolls back (whatever raised, the commit included): one of them, once. Files
    follow the rows: the archived bundle is removed when its row is not committed
    (:func:`_finalize`), the uploaded part only when it is
    (:func:`_drop_part_once_committed`)."""
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


def _refused(ctx: Context, s: Session, run: Run, reason: str) -> UploadFailed:
    """The error refusing a bundle that passed its checksum but not inspection; it says
    never to resend it. The part is dropped (the agent keeps its copy in ``rejected/``),
    and the reason is written on the run once the request's transaction has rolled back
    (in a transaction of its own, so that the refusal does not undo it)."""
    ctx.archive.reset_part(run.id)
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
    return UploadFailed(
        f"{reason}; refused for good: sending the same bundle again cannot help",
        fault=wire.UploadFault.REFUSED,
    )
