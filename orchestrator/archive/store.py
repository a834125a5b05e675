"""Files of the raw archive and of uploads in progress.

Layout: ``<root>/<campaign or adhoc>/<node>/<run>/bundle.tar.gz`` beside
``bundle.sha256`` (sha256sum format) and the bundle's ``manifest.json``. Every write
goes to a temporary name, is fsynced, then renamed, so a crash or a full disk never
leaves a half bundle under the final name.

Uploads in progress are ``<uploads>/<run>.part``; the part's size is the upload's
offset (nothing else records it), so the bytes held and the offset reported can never
disagree. ``<uploads>/<run>.lock`` takes one upload request of a run at a time (two
copies of one bundle sent at once must not both verify and archive it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from orchestrator.errors import TestbedError

#: What :meth:`Archive.store_bundle` writes in a run's folder.
BUNDLE_FILES = ("bundle.tar.gz", "manifest.json", "bundle.sha256")


class StorageError(TestbedError):
    """The disk refused a write (full, read-only); nothing already stored was changed."""


class OffsetMismatch(TestbedError):
    """A chunk aimed at another offset than where the part ends; ``held`` is the end."""

    def __init__(self, run_id: str, *, held: int, offset: int) -> None:
        super().__init__(f"upload of run {run_id} is at offset {held}, not {offset}; resume there")
        self.held = held


def _unlinked(fd: int, path: Path) -> bool:
    """True when ``fd`` no longer is the file at ``path`` (reset while we waited)."""
    try:
        return os.stat(path).st_ino != os.fstat(fd).st_ino
    except FileNotFoundError:
        return True


@contextmanager
def _existing_locked(path: Path, operation: int) -> Iterator[int | None]:
    """The part file at ``path`` under ``operation`` (a flock), or None when there is
    none, or it was removed while we waited for the lock."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        yield None
        return
    try:
        fcntl.flock(fd, operation)
        yield None if _unlinked(fd, path) else fd
    finally:
        os.close(fd)


def _open_locked(path: Path, run_id: str) -> int:
    """The part file, created if absent, under an exclusive lock. Retries when a reset
    removed it while we waited for the lock, so bytes never go to an unlinked file."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise StorageError(f"cannot open the upload of run {run_id}: {e.strerror}") from e
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not _unlinked(fd, path):
            return fd
        os.close(fd)


def _write_all(fd: int, offset: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        if n == 0:  # a regular file says ENOSPC rather than 0, but never spin
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view, offset = view[n:], offset + n


def _cut_back(fd: int, size: int) -> None:
    """Best effort after a failed write: the part ends where it ended before. Should
    this fail too, the upload's final checksum still catches the stray bytes."""
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    except OSError:
        pass


#: Files are copied into the archive this many bytes at a time.
COPY_CHUNK = 1 << 20


def _fsync_write(path: Path, data: bytes | Path) -> None:
    """Write ``data`` (bytes, or the file at that path, copied in chunks) to ``path``
    through a temporary name, fsynced, then renamed."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("wb") as f:
            if isinstance(data, Path):
                with data.open("rb") as src:
                    while block := src.read(COPY_CHUNK):
                        f.write(block)
            else:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path.name} to the archive: {e.strerror}") from e


class Archive:
    def __init__(self, root: Path, uploads: Path) -> None:
        self.root = root
        self.uploads = uploads

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.uploads.mkdir(parents=True, exist_ok=True)

    # uploads in progress -------------------------------------------------------------
    # The part file is the one truth of an upload's progress: its size is the offset
    # the agent resumes from (as tus's Upload-Offset). Bytes count once written and
    # fsynced; a write that fails is cut back to where the part ended before it.
    def part_path(self, run_id: str) -> Path:
        return self.uploads / f"{run_id}.part"

    def part_size(self, run_id: str) -> int:
        """Bytes held for ``run_id``: 0 when there is no part (never sent, expired or
        reset). Read under a shared lock, so never while a chunk is half written."""
        with _existing_locked(self.part_path(run_id), fcntl.LOCK_SH) as fd:
            return 0 if fd is None else os.fstat(fd).st_size

    def reset_part(self, run_id: str) -> int:
        """Drop the bytes held for ``run_id`` and return how many there were. A file
        system change, so it outlives any database rollback: nothing is held after."""
        path = self.part_path(run_id)
        with _existing_locked(path, fcntl.LOCK_EX) as fd:
            if fd is None:
                return 0
            path.unlink()
            return os.fstat(fd).st_size

    def append_part(self, run_id: str, *, offset: int, data: bytes) -> int:
        """Write ``data`` where the part ends and return the bytes held after it.

        Raises :class:`OffsetMismatch` when the part does not end at ``offset``, and
        :class:`StorageError` when the disk refuses the bytes: the part is then cut back
        to ``offset``, so a half-written chunk is never counted as held.
        """
        fd = _open_locked(self.part_path(run_id), run_id)
        try:
            held = os.fstat(fd).st_size
            if held != offset:
                raise OffsetMismatch(run_id, held=held, offset=offset)
            try:
                _write_all(fd, offset, data)
                os.fsync(fd)
            except OSError as e:
                _cut_back(fd, offset)
                raise StorageError(
                    f"cannot store upload bytes for run {run_id}: {e.strerror}; free space "
                    "on the orchestrator and retry (the agent keeps the bundle)"
                ) from e
            return offset + len(data)
        finally:
            os.close(fd)

    @contextmanager
    def upload_lock(self, run_id: str) -> Iterator[None]:
        """Hold the run's upload for one request, its commit included, across threads
        and processes (an exclusive flock on ``<run>.lock``). Without it, two requests
        carrying the last bytes of the same bundle could both find the part full, both
        verify and archive it, and the one whose commit lost would remove the files the
        other had committed (:meth:`discard_bundle` on its rollback)."""
        fd = _open_locked(self.uploads / f"{run_id}.lock", run_id)
        try:
            yield
        finally:
            os.close(fd)

    def drop_upload_lock(self, run_id: str) -> None:
        """Remove the lock file of a finished upload; call it while holding the lock.
        A request waiting on it then finds it unlinked and takes a new one
        (:func:`_open_locked`), so the lock stays exclusive."""
        (self.uploads / f"{run_id}.lock").unlink(missing_ok=True)

    def part_digest(self, run_id: str) -> tuple[int, str]:
        digest = hashlib.sha256()
        size = 0
        with self.part_path(run_id).open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
                size += len(block)
        return size, digest.hexdigest()

    # the archive proper -------------------------------------------------------------
    def run_dir(self, *, campaign: str | None, node: str, run_id: str) -> Path:
        return self.root / (campaign or "adhoc") / node / run_id

    def store_bundle(
        self, run_dir: Path, *, source: Path, sha256: str, manifest: Mapping[str, Any]
    ) -> Path:
        """Copy a verified bundle (the file at ``source``, in chunks) into ``run_dir``;
        idempotent for the same bytes."""
        target = run_dir / BUNDLE_FILES[0]
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create {run_dir}: {e.strerror}") from e
        if target.exists() and (run_dir / "bundle.sha256").exists():
            stored = (run_dir / "bundle.sha256").read_text().split()[0]
            if stored == sha256:
                return target
        _fsync_write(target, source)
        _fsync_write(
            run_dir / "manifest.json", json.dumps(dict(manifest), indent=2, sort_keys=True).encode()
        )
        _fsync_write(run_dir / "bundle.sha256", f"{sha256}  bundle.tar.gz\n".encode())
        return target

    def discard_bundle(self, run_dir: Path) -> None:
        """Remove what :meth:`store_bundle` wrote in ``run_dir`` (its database row was
        not committed), so that no archived file is left without its row."""
        for name in reversed(BUNDLE_FILES):  # the checksum first: it vouches for the rest
            (run_dir / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not empty (other files) or already gone
            run_dir.rmdir()

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def absolute(self, relative: str) -> Path:
        return self.root / relative
