"""Dataset releases through the API: each built or verified by a background job.

Why a job and not the request: a release reads every bundle of its campaigns from the
archive, rewrites every capture and computes its flows in Python, writes Parquet, and
its check validates every CSV row with frictionless: a month's campaign takes minutes.
No request should hold a connection, a proxy's timeout and a worker that long, nor
fail half-way when the client goes. So ``POST``
answers 202 at once with the release's record, and a thread of the process that took
the request builds it; the record (table ``dataset_releases``, shared by replicas) says
how far it got, and ``GET`` reads it from any replica. A bounded synchronous build would
have had to refuse large campaigns, the ones a release is for.

- **One job at a time** (``settings.datasets.max_jobs``) across replicas: the admission
  check holds the planning lock's kind of advisory lock on PostgreSQL and a process
  lock on SQLite; another request gets 409 naming the job to wait for.
- **A job that dies with its process** stops its heartbeat (every
  ``heartbeat_s``); one silent for three beats is marked failed ("interrupted") the
  next time anyone reads or starts a release, and its partial files are removed.
- **Files appear whole or not at all**: a build writes ``<id>.partial/`` and renames it
  to ``<id>/`` after its own verification passed.
- **Keys never leave the orchestrator**: they live in ``settings.datasets.keys_dir``,
  apart from the served folder, one file per key name; the same name (and inputs) gives
  a byte-identical release.

Who may do what (services.access): building and deleting a release publishes or drops
data of the fleet under the operator's name, and costs the orchestrator minutes of a
core, so administrators only, as the other fleet-wide writes (quotas, the plan). A
release is read (record, descriptor, files) by whoever may read every campaign in it:
it holds nothing its campaigns' data does not. Verifying it again on the server is an
administrator's check of the stored copy (it takes the job slot); a reader checks a
downloaded copy with ``testbed dataset verify``.

The release's contents come from :mod:`.datasets` and :mod:`.dataset_files`, imported
when first needed: they need the ``dataset`` extra (pyarrow, frictionless,
yacryptopan), and without it only these routes answer 501.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.dataset.keys import KEY_BYTES, BadKey, check_key
from orchestrator.dataset.metadata import CHECKSUMS, DESCRIPTOR, parse_checksums
from orchestrator.dataset.release import BadRelease, check_licence, check_version, parse_exclusion
from orchestrator.errors import Conflict, Invalid, NotFound, NotInstalled, TestbedError
from orchestrator.model.ids import new_release_id
from orchestrator.schemas import (
    ExcludedRunPublic,
    ReleaseCreate,
    ReleaseFilePublic,
    ReleasePublic,
)
from orchestrator.services.access import readable
from orchestrator.services.auth import Principal
from orchestrator.services.context import Context
from orchestrator.store import locks
from orchestrator.store.tables import DatasetRelease

log = logging.getLogger(__name__)

BUILDING, READY, FAILED = "building", "ready", "failed"
BUILD, VERIFY = "build", "verify"
#: Release jobs are admitted one at a time across replicas.
RELEASE_JOBS_LOCK = "testbed:dataset-release-jobs"
#: A job silent for this many heartbeats is taken for dead.
SILENT_BEATS = 3
#: Days a release's period may name (dates the archive can hold).
FIRST_DAY, LAST_DAY = date(2000, 1, 1), date(2199, 12, 31)

_admission = threading.Lock()


def read_key(path: Path) -> tuple[bytes, bool]:
    """The release key in ``path`` (32 raw bytes or 64 hex digits), made and saved (mode
    600) when the file does not exist yet; and whether it was made now."""
    if not path.exists():
        key = secrets.token_bytes(KEY_BYTES)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key.hex() + "\n")
        return key, True
    data = path.read_bytes()
    text = data.strip()
    if len(text) == 2 * KEY_BYTES:
        try:
            return check_key(bytes.fromhex(text.decode())), False
        except (ValueError, UnicodeDecodeError):
            pass
    return check_key(data), False


def missing_extra(e: ImportError) -> NotInstalled:
    """What to say when the ``dataset`` extra's packages are not installed."""
    return NotInstalled(
        f"dataset releases need the 'dataset' extra ({e.name} is missing): install "
        "mbb-testbed[orchestrator,dataset], as the orchestrator image does")


def builder() -> ModuleType:
    """:mod:`.datasets`, which needs the ``dataset`` extra; NotInstalled without it."""
    try:
        from orchestrator.services import datasets
    except ImportError as e:
        raise missing_extra(e) from e
    return datasets


def checker() -> ModuleType:
    """:mod:`.dataset_files` (verification), which needs the ``dataset`` extra."""
    try:
        from orchestrator.services import dataset_files
    except ImportError as e:
        raise missing_extra(e) from e
    return dataset_files


# --- where things are --------------------------------------------------------------------


def release_dir(ctx: Context, release_id: str) -> Path:
    return ctx.settings.datasets.dir / release_id


def _partial_dir(ctx: Context, release_id: str) -> Path:
    return ctx.settings.datasets.dir / f"{release_id}.partial"


def _key_path(ctx: Context, name: str) -> Path:
    return ctx.settings.datasets.keys_dir / f"{name}.key"


# --- records ------------------------------------------------------------------------------


def _public(row: DatasetRelease) -> ReleasePublic:
    return ReleasePublic(
        id=row.id, state=row.state, job=row.job, campaigns=list(row.campaigns),
        options=dict(row.options), version=row.version, key=row.key_name,
        created_by=row.created_by, created_at=row.created_at, updated_at=row.updated_at,
        finished_at=row.finished_at, runs_read=row.runs_read, runs_total=row.runs_total,
        runs=row.runs, rows=row.rows, files=row.files, bytes=row.bytes,
        excluded=[ExcludedRunPublic(run=e["run"], reason=e["reason"])
                  for e in row.excluded or []],
        error=row.error, verified_at=row.verified_at, problems=row.problems)


def _expire_silent(ctx: Context, s: Session) -> None:
    """Jobs whose process stopped: a build is failed (its partial files removed), a
    verification dropped with a problem saying so."""
    beat = timedelta(seconds=ctx.settings.datasets.heartbeat_s)
    now = ctx.clock.now()
    silent = s.scalars(select(DatasetRelease).where(
        DatasetRelease.job.is_not(None),
        DatasetRelease.updated_at < now - SILENT_BEATS * beat)).all()
    for row in silent:
        since = f"{row.updated_at:%Y-%m-%d %H:%M:%S}Z"
        why = (f"interrupted: no sign of the {row.job} job since {since} (its "
               "orchestrator process stopped?)")
        log.warning("release %s: %s", row.id, why)
        if row.job == BUILD:
            row.state, row.error, row.finished_at = FAILED, why + "; build it again", now
            shutil.rmtree(_partial_dir(ctx, row.id), ignore_errors=True)
        else:
            row.problems, row.verified_at = [why + "; verify it again"], now
        row.job = None


def _readable_row(ctx: Context, s: Session, principal: Principal,
                  release_id: str) -> DatasetRelease:
    """The release, or NotFound whether it does not exist or holds a campaign the caller
    may not read (services.access: unknown and forbidden look the same)."""
    row = s.get(DatasetRelease, release_id)
    if row is None or not _may_read(ctx, principal, row):
        raise NotFound(f"no dataset release {release_id!r} of campaigns you may read")
    return row


def _may_read(ctx: Context, principal: Principal, row: DatasetRelease) -> bool:
    if principal.is_admin:
        return True
    scope = readable(ctx, principal)
    return all(scope.campaign(c) for c in row.campaigns)


def list_releases(ctx: Context, principal: Principal, *, limit: int) -> list[ReleasePublic]:
    """The newest releases the caller may read."""
    with ctx.db.session() as s:
        _expire_silent(ctx, s)
        scope = readable(ctx, principal)
        rows = s.scalars(select(DatasetRelease).order_by(DatasetRelease.created_at.desc(),
                                                         DatasetRelease.id.desc())).all()
        shown = [r for r in rows if all(scope.campaign(c) for c in r.campaigns)]
        return [_public(r) for r in shown[:limit]]


def get_release(ctx: Context, principal: Principal, release_id: str) -> ReleasePublic:
    with ctx.db.session() as s:
        _expire_silent(ctx, s)
        return _public(_readable_row(ctx, s, principal, release_id))


def _ready_dir(ctx: Context, principal: Principal, release_id: str) -> Path:
    with ctx.db.session() as s:
        _expire_silent(ctx, s)
        row = _readable_row(ctx, s, principal, release_id)
        if row.state != READY:
            raise Conflict(f"release {release_id} is {row.state}"
                           + (f" ({row.error})" if row.error else "")
                           + ": only a ready release has files", state=row.state)
    return release_dir(ctx, release_id)


def descriptor(ctx: Context, principal: Principal, release_id: str) -> dict[str, Any]:
    """The release's ``datapackage.json``, as in the release."""
    import json

    path = _ready_dir(ctx, principal, release_id) / DESCRIPTOR
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise NotFound(f"release {release_id}: {DESCRIPTOR} is missing or damaged ({e}); "
                       "verify the release") from e
    return doc


def _listed(root: Path) -> dict[str, str]:
    """Every file of the release but SHA256SUMS -> its SHA-256, as SHA256SUMS lists."""
    try:
        listed, _problems = parse_checksums((root / CHECKSUMS).read_text())
    except OSError as e:
        raise NotFound(f"{root.name}: {CHECKSUMS} is missing ({e}); verify the release") from e
    return listed


def list_files(ctx: Context, principal: Principal, release_id: str) -> list[ReleaseFilePublic]:
    """Every file of a ready release with its size and SHA-256 (as SHA256SUMS says;
    ``SHA256SUMS`` itself with the digest of its bytes)."""
    root = _ready_dir(ctx, principal, release_id)
    listed = _listed(root)
    sums = (root / CHECKSUMS).read_bytes()
    out = [ReleaseFilePublic(path=CHECKSUMS, bytes=len(sums),
                             sha256=hashlib.sha256(sums).hexdigest())]
    for path, digest in sorted(listed.items()):
        target = root / path
        size = target.stat().st_size if target.is_file() else 0
        out.append(ReleaseFilePublic(path=path, bytes=size, sha256=digest))
    return out


def file_path(ctx: Context, principal: Principal, release_id: str,
              path: str) -> tuple[Path, str]:
    """The file at ``path`` in a ready release and its SHA-256 as SHA256SUMS lists it
    (SHA256SUMS: its own): only a path SHA256SUMS lists, so nothing else on the disk is
    reachable by any spelling of a path."""
    root = _ready_dir(ctx, principal, release_id)
    listed = _listed(root)
    if path != CHECKSUMS and path not in listed:
        raise NotFound(f"release {release_id} has no file {path!r}: GET "
                       f"/api/v1/datasets/{release_id}/files lists them")
    target = root / path
    if not target.resolve().is_relative_to(root.resolve()):  # a SHA256SUMS edited on disk
        raise NotFound(f"release {release_id}: {path!r} is outside the release")
    if not target.is_file():
        raise NotFound(f"release {release_id}: {path} is listed but missing; verify it")
    digest = listed.get(path) or hashlib.sha256(target.read_bytes()).hexdigest()
    return target, digest


# --- jobs ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _admitting(ctx: Context) -> Iterator[Session]:
    """A unit of work that may start a job: one at a time in this process and, on
    PostgreSQL, across replicas; silent jobs are expired first, so they do not count."""
    with _admission, ctx.db.session() as s:
        locks.lock_in_transaction(s, RELEASE_JOBS_LOCK)
        _expire_silent(ctx, s)
        running = s.scalars(select(DatasetRelease).where(
            DatasetRelease.job.is_not(None)).order_by(DatasetRelease.created_at)).all()
        if len(running) >= ctx.settings.datasets.max_jobs:
            names = ", ".join(f"{r.id} ({r.job})" for r in running)
            raise Conflict(f"{len(running)} release job(s) running ({names}), the most "
                           f"at once ({ctx.settings.datasets.max_jobs}): wait for it "
                           "(GET /api/v1/datasets/ID) and send this again",
                           running=[r.id for r in running])
        yield s


def _day(d: date | None, what: str) -> date | None:
    if d is not None and not FIRST_DAY <= d <= LAST_DAY:
        raise Invalid(f"{what} {d}: give a day between {FIRST_DAY} and {LAST_DAY}")
    return d


def _request(ctx: Context, release_id: str, body: ReleaseCreate, key: bytes,
             previous: Path | None) -> Any:
    """The build's :class:`.datasets.BuildRequest` from the API's body."""
    datasets = builder()
    first, last = _day(body.from_day, "from_day"), _day(body.to_day, "to_day")
    version = body.version
    day = _day(body.daily, "daily")
    if day is not None:
        if first or last:
            raise Invalid("daily sets the period: give it without from_day and to_day")
        first = last = day
        version = version or day.isoformat()
    if first and last and last < first:
        raise Invalid(f"to_day {last} is before from_day {first}: give the first day first")
    try:
        return datasets.BuildRequest(
            campaigns=tuple(body.campaigns), out=_partial_dir(ctx, release_id), key=key,
            version=check_version(version or "1.0.0"), period_from=first,
            period_to=None if last is None else last + timedelta(days=1),
            licence=check_licence(body.licence),
            authors=tuple(body.authors) or datasets.BuildRequest.authors,
            pseudonymise=body.pseudonymise_nodes, grid_deg=body.grid_deg, raw=body.raw,
            exclusions=tuple(parse_exclusion(e) for e in body.exclude),
            link_profiles={sim: datasets.LinkProfile(text.encode())
                           for sim, text in body.link_profiles.items()},
            previous=previous)
    except BadRelease as e:
        raise Invalid(str(e)) from e


def start_build(ctx: Context, principal: Principal, body: ReleaseCreate,
                *, start: Callable[[Callable[[], None], str], None] | None = None,
                ) -> ReleasePublic:
    """Check the request, record the release as building and start its job; the
    reply comes before the build is done (see the module docstring)."""
    principal.require_admin()
    datasets = builder()
    release_id = new_release_id(ctx.clock.now())
    previous = None
    if body.previous is not None:
        previous = _ready_dir(ctx, principal, body.previous)
    req = _request(ctx, release_id, body, bytes(KEY_BYTES), previous)
    runs = datasets.finished_runs(ctx, req)  # unknown campaign, empty period: now, not later
    datasets.check_room(ctx, req.out)  # a disk at its reserve: now (the size: in the job)
    key_name = body.key or release_id
    try:  # made only for a request that passed every check
        key, _made = read_key(_key_path(ctx, key_name))
    except BadKey as e:
        raise Invalid(f"release key {key_name!r}: {e}") from e
    req = replace(req, key=key)
    with _admitting(ctx) as s:
        now = ctx.clock.now()
        row = DatasetRelease(
            id=release_id, state=BUILDING, job=BUILD, campaigns=list(req.campaigns),
            options=body.model_dump(mode="json", exclude={"campaigns", "link_profiles"})
            | {"link_profiles": sorted(body.link_profiles)},
            version=req.version, key_name=key_name, created_by=principal.name,
            created_at=now, updated_at=now, runs_read=0, runs_total=len(runs))
        s.add(row)
        s.flush()
        public = _public(row)
    (start or _thread)(lambda: _build(ctx, release_id, req), f"release {release_id} build")
    return public


def start_verify(ctx: Context, principal: Principal, release_id: str,
                 *, start: Callable[[Callable[[], None], str], None] | None = None,
                 ) -> ReleasePublic:
    """Verify a ready release again (its files as they are on the disk now), as a job
    (administrators: it holds the one job slot; a reader checks a downloaded copy with
    ``testbed dataset verify``)."""
    principal.require_admin()
    checker()
    _ready_dir(ctx, principal, release_id)
    with _admitting(ctx) as s:
        row = s.get(DatasetRelease, release_id)
        if row is None or row.state != READY:
            raise Conflict(f"release {release_id} is no longer ready")
        row.job, row.updated_at = VERIFY, ctx.clock.now()
        s.flush()
        public = _public(row)
    (start or _thread)(lambda: _verify(ctx, release_id), f"release {release_id} verify")
    return public


def delete_release(ctx: Context, principal: Principal, release_id: str) -> None:
    """Remove a release's files and record (administrators); its key is kept, so the
    same release can be built again."""
    principal.require_admin()
    with ctx.db.session() as s:
        _expire_silent(ctx, s)
        row = _readable_row(ctx, s, principal, release_id)
        if row.job is not None:
            raise Conflict(f"release {release_id} has a {row.job} job running: delete it "
                           "once the job is done", job=row.job)
        s.delete(row)
    shutil.rmtree(release_dir(ctx, release_id), ignore_errors=True)


def _thread(work: Callable[[], None], name: str) -> None:
    threading.Thread(target=work, name=name, daemon=True).start()


class _Heartbeat:
    """Stamps the job's row every ``heartbeat_s`` while the job runs, with its
    progress: the sign of life that tells a running job from a dead one."""

    def __init__(self, ctx: Context, release_id: str) -> None:
        self.ctx, self.release_id = ctx, release_id
        self.read = self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True,
                                        name=f"release {release_id} heartbeat")

    def progress(self, read: int, total: int) -> None:
        self.read, self.total = read, total

    def _beat(self) -> None:
        while not self._stop.wait(self.ctx.settings.datasets.heartbeat_s):
            try:
                with self.ctx.db.session() as s:
                    row = s.get(DatasetRelease, self.release_id)
                    if row is not None:
                        row.updated_at = self.ctx.clock.now()
                        if self.total:
                            row.runs_read, row.runs_total = self.read, self.total
            except Exception:  # the database away a moment: the next beat tries again
                log.exception("release %s: heartbeat not recorded", self.release_id)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _failure(e: Exception) -> str:
    if isinstance(e, TestbedError):
        return str(e)
    log.error("release job failed", exc_info=e)
    return (f"internal error ({type(e).__name__}): see the orchestrator's log, fix the "
            "cause, and build it again")


def _build(ctx: Context, release_id: str, req: Any) -> None:
    partial, final = req.out, release_dir(ctx, release_id)
    datasets, files = builder(), checker()
    try:
        with _Heartbeat(ctx, release_id) as beat:
            built = datasets.build_release(ctx, req, progress=beat.progress)
            verdict = files.verify_release(partial)
        if not verdict.ok:
            raise Invalid("the built release does not verify: " + "; ".join(verdict.problems))
        os.replace(partial, final)
    except Exception as e:
        shutil.rmtree(partial, ignore_errors=True)
        with ctx.db.session() as s:
            row = s.get(DatasetRelease, release_id)
            if row is not None:
                row.state, row.job, row.error = FAILED, None, _failure(e)
                row.finished_at = row.updated_at = ctx.clock.now()
        return
    size = sum(p.stat().st_size for p in final.rglob("*") if p.is_file())
    with ctx.db.session() as s:
        row = s.get(DatasetRelease, release_id)
        if row is None:  # deleted meanwhile (only once failed): nothing to keep
            shutil.rmtree(final, ignore_errors=True)
            return
        now = ctx.clock.now()
        row.state, row.job, row.finished_at, row.updated_at = READY, None, now, now
        row.runs_read = row.runs_total
        row.runs, row.rows, row.files, row.bytes = (built.runs, dict(built.counts),
                                                    verdict.files + 1, size)
        row.excluded = [{"run": r, "reason": why} for r, why in built.excluded]
        row.verified_at, row.problems = now, []
    log.info("release %s ready: %d runs, %d files, %d bytes", release_id, built.runs,
             verdict.files + 1, size)


def _verify(ctx: Context, release_id: str) -> None:
    try:
        with _Heartbeat(ctx, release_id):
            problems = checker().verify_release(release_dir(ctx, release_id)).problems
    except Exception as e:
        problems = [_failure(e)]
    with ctx.db.session() as s:
        row = s.get(DatasetRelease, release_id)
        if row is not None:
            row.job, row.problems = None, list(problems)
            row.verified_at = row.updated_at = ctx.clock.now()
