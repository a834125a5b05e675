"""Files of the raw archive and of uploads in progress.

Layout: ``<root>/<campaign or adhoc>/<node>/<run>/bundle.tar.gz`` beside
``bundle.sha256`` (sha256sum format) and the bundle's ``manifest.json``. Every write
goes to a temporary name, is fsynced, then renamed, so a crash or a full disk never
leaves a half bundle under the final name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.errors import TestbedError

#: What :meth:`Archive.store_bundle` writes in a run's folder.
BUNDLE_FILES = ("bundle.tar.gz", "manifest.json", "bundle.sha256")


class StorageError(TestbedError):
    """The disk refused a write (full, read-only); nothing already stored was changed."""


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
    def part_path(self, run_id: str) -> Path:
        return self.uploads / f"{run_id}.part"

    def reset_part(self, run_id: str) -> None:
        self.part_path(run_id).unlink(missing_ok=True)

    def write_part(self, run_id: str, offset: int, data: bytes) -> None:
        path = self.part_path(run_id)
        try:
            with path.open("r+b" if path.exists() else "wb") as f:
                f.seek(offset)
                f.write(data)
                f.truncate(offset + len(data))
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise StorageError(
                f"cannot store upload bytes for run {run_id}: {e.strerror}; free space on "
                "the orchestrator and retry (the agent keeps the bundle)"
            ) from e

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
