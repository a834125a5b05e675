"""The result-bundle format: a gzip'd tar of a run's files plus a checksummed manifest.

The agent builds a bundle with :func:`build_bundle`; the orchestrator checks it with
:func:`inspect_bundle` before anything is archived. Checking never extracts to disk: it
reads members from memory-bounded streams, so a hostile archive (path traversal, links,
devices, a zip bomb) is refused before a byte of it lands in the raw archive.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

FORMAT = "testbed.bundle"
VERSION = 1
MANIFEST = "manifest.json"


class BundleError(ValueError):
    """The bundle is malformed or hostile; the message says what and where."""


@dataclass(frozen=True)
class BundleFile:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class BundleLimits:
    """Bounds on what one bundle may unpack to (members and bytes)."""

    max_members: int = 10_000
    max_unpacked_bytes: int = 2 * 1024**3


@dataclass(frozen=True)
class BundleContents:
    run_id: str
    node_id: str
    files: tuple[BundleFile, ...]
    manifest: Mapping[str, Any]


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def check_member_path(name: str) -> str:
    """Return ``name`` normalised, or raise when it could escape the run's directory."""
    if not name or name.startswith("/") or "\\" in name or "\x00" in name:
        raise BundleError(f"bundle member {name!r}: absolute or malformed path")
    parts = PurePosixPath(name).parts
    if any(p in ("..", "") for p in parts):
        raise BundleError(f"bundle member {name!r}: path traversal ('..') is not allowed")
    clean = "/".join(p for p in parts if p != ".")
    if not clean:
        raise BundleError(f"bundle member {name!r}: empty path")
    return clean


def build_bundle(
    root: Path, *, run_id: str, node_id: str, extra: Mapping[str, Any] | None = None
) -> bytes:
    """Pack every regular file under ``root`` with a manifest of sizes and SHA-256 sums."""
    files: list[tuple[str, Path]] = sorted(
        (p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file()
    )
    listing = [
        {"path": rel, "size": p.stat().st_size, "sha256": sha256_file(p)}
        for rel, p in files
        if rel != MANIFEST
    ]
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "run_id": run_id,
        "node_id": node_id,
        "files": listing,
        **(dict(extra) if extra else {}),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = json.dumps(manifest, indent=2, sort_keys=True).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for rel, path in files:
            if rel != MANIFEST:
                tar.add(path, arcname=rel, recursive=False)
    return buf.getvalue()


def _members(tar: tarfile.TarFile, limits: BundleLimits) -> Iterable[tuple[str, bytes]]:
    total = 0
    for count, member in enumerate(tar, start=1):
        if count > limits.max_members:
            raise BundleError(f"bundle has more than {limits.max_members} members")
        name = check_member_path(member.name)
        if member.isdir():
            continue
        if not member.isfile():
            raise BundleError(
                f"bundle member {name!r}: only regular files are allowed (links and devices "
                "are refused)"
            )
        total += member.size
        if total > limits.max_unpacked_bytes:
            raise BundleError(f"bundle unpacks to more than {limits.max_unpacked_bytes} bytes")
        handle = tar.extractfile(member)
        if handle is None:  # pragma: no cover - isfile() members always have data
            raise BundleError(f"bundle member {name!r} has no data")
        yield name, handle.read()


def inspect_bundle(data: bytes, limits: BundleLimits | None = None) -> BundleContents:
    """Validate a bundle entirely in memory and return what it holds.

    Raises :class:`BundleError` naming the first problem found.
    """
    limits = limits or BundleLimits()
    seen: dict[str, BundleFile] = {}
    manifest: dict[str, Any] | None = None
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")  # noqa: SIM115 - closed below
    except (tarfile.TarError, EOFError, OSError) as e:
        raise BundleError(f"not a readable tar/tar.gz archive: {e}") from e
    try:
        with tar:
            for name, blob in _members(tar, limits):
                if name in seen or (name == MANIFEST and manifest is not None):
                    raise BundleError(f"bundle member {name!r} appears twice")
                if name == MANIFEST:
                    try:
                        manifest = json.loads(blob)
                    except ValueError as e:
                        raise BundleError(f"{MANIFEST} is not valid JSON: {e}") from e
                    continue
                seen[name] = BundleFile(name, len(blob), sha256_bytes(blob))
    except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as e:
        raise BundleError(f"bundle is truncated or corrupt: {e}") from e
    if not isinstance(manifest, dict):
        raise BundleError(f"bundle has no {MANIFEST}")
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise BundleError(
            f"{MANIFEST}: expected format {FORMAT!r} version {VERSION}, got "
            f"{manifest.get('format')!r} version {manifest.get('version')!r}"
        )
    listed: dict[str, Any] = {}
    for entry in manifest.get("files", []):
        if not isinstance(entry, dict) or not {"path", "size", "sha256"} <= entry.keys():
            raise BundleError(f"{MANIFEST}: malformed file entry {entry!r}")
        listed[check_member_path(str(entry["path"]))] = entry
    missing = sorted(set(listed) - set(seen))
    unlisted = sorted(set(seen) - set(listed))
    if missing or unlisted:
        raise BundleError(
            f"{MANIFEST} does not match the archive: missing {missing}, unlisted {unlisted}"
        )
    for name, entry in listed.items():
        got = seen[name]
        if got.sha256 != entry["sha256"] or got.size != entry["size"]:
            raise BundleError(f"checksum mismatch for {name!r}: the file changed in transit")
    return BundleContents(
        run_id=str(manifest.get("run_id", "")),
        node_id=str(manifest.get("node_id", "")),
        files=tuple(seen[n] for n in sorted(seen)),
        manifest=manifest,
    )


def safe_extract(tar: tarfile.TarFile, dest: Path) -> list[str]:
    """Extract regular files and folders of ``tar`` under ``dest``; returns the names
    skipped (links, devices). Paths that could escape ``dest`` raise BundleError.

    Written out rather than ``extractall(filter="data")``: that filter arrived in
    Python 3.11.4, and Debian bookworm's images run 3.11.2.
    """
    skipped: list[str] = []
    for member in tar:
        name = check_member_path(member.name)
        target = dest / name
        if member.isdir():
            target.mkdir(parents=True, exist_ok=True)
        elif member.isfile():
            target.parent.mkdir(parents=True, exist_ok=True)
            handle = tar.extractfile(member)
            if handle is None:  # pragma: no cover - isfile() members always have data
                continue
            with target.open("wb") as out:
                while block := handle.read(1 << 20):
                    out.write(block)
        else:
            skipped.append(name)
    return skipped
