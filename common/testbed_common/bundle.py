"""The result-bundle format: a gzip'd tar of a run's files plus a checksummed manifest.

The agent builds a bundle with :func:`build_bundle`; the orchestrator checks it with
:func:`inspect_bundle_file` before anything is archived. Checking never extracts to
disk and never holds a member whole: it streams the archive through
:class:`~testbed_common.tarstream.TarReader`, which checks every header's declared size
before reading what it announces, so a hostile archive (path traversal, links, devices,
a zip bomb, a gigabyte "long name") is refused in bounded memory before a byte of it
lands in the raw archive.

What checking costs is bounded by the bundle's own size, whatever it declares or
decompresses to: the tar stream may decompress to at most
:attr:`BundleLimits.max_expansion` times the stored bytes (or
:attr:`BundleLimits.expansion_floor_bytes`, so that small bundles of compressible
results pass), counted as it is read and checked from each header before its data is.
And a bundle is refused at the first member that breaks the format, not after reading
it all: the manifest comes first (as :func:`build_bundle` writes it), so its format,
its run and node, and each later member's name, size and checksum are checked as that
member is met.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, cast

from testbed_common.tarstream import BLOCK, TarMember, TarReader, open_decompressed
from testbed_common.untrusted import BundleError as BundleError  # re-exported for callers
from testbed_common.untrusted import load_json

FORMAT = "testbed.bundle"
VERSION = 1
MANIFEST = "manifest.json"
#: Objects and arrays a manifest may hold besides one object per file (its own, the
#: file list, and the agent's ``extra`` metadata).
MANIFEST_EXTRA_CONTAINERS = 256


@dataclass(frozen=True)
class BundleFile:
    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class BundleLimits:
    """Bounds on what one bundle may unpack to, each checked from a header before the
    bytes it announces are read (see docs/security.md, "Bundle inspection bounds")."""

    #: Files in a bundle. A run writes dozens (results, metadata, logs, captures).
    max_members: int = 5_000
    max_unpacked_bytes: int = 2 * 1024**3
    #: A GNU long name or a pax header, bytes (a path is at most 4 KiB on Linux).
    max_header_bytes: int = 64 * 1024
    #: manifest.json, bytes: 5,000 file entries take about 800 kB. With its objects
    #: capped by ``max_members``, parsing it costs at most ~10 times this.
    max_manifest_bytes: int = 1024**2
    #: Bytes of tar the stored bundle may decompress to, per stored byte. gzip's
    #: limit is about 1,000 (a run of zeros); a run's results pack 2-20 times (captures
    #: with payload about 2, JSON and logs 5-20), so 50 leaves room and keeps a
    #: decompression bomb's CPU within a small multiple of its upload's.
    max_expansion: int = 50
    #: Whatever the ratio, this much may always be decompressed: a small bundle of very
    #: compressible results (a log of repeated lines) is not a bomb.
    expansion_floor_bytes: int = 64 * 1024**2

    def unpack_budget(self, stored_bytes: int) -> int:
        """Bytes of member data a bundle of ``stored_bytes`` may unpack to."""
        return min(self.max_unpacked_bytes,
                   max(self.expansion_floor_bytes, self.max_expansion * stored_bytes))


@dataclass(frozen=True)
class BundleContents:
    run_id: str
    node_id: str
    files: tuple[BundleFile, ...]
    manifest: Mapping[str, Any]
    #: The data of the members the caller asked to keep (``keep=``), read in the same
    #: pass as the inspection; a member absent, or over its cap, is not here.
    kept: Mapping[str, bytes] = field(default_factory=dict)


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


#: gzip's own default, not tarfile's 9: a run's captures (headers and a few bytes of
#: random payload each) pack to within 1 % of level 9's size in half its CPU time (5.6
#: MB of such a capture: 0.39 s against 0.83 s), and the bundle is built on the node
#: between the run's end and its result, a small CPU on a real node.
GZIP_LEVEL = 6


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
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=GZIP_LEVEL) as tar:
        data = json.dumps(manifest, indent=2, sort_keys=True).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for rel, path in files:
            if rel != MANIFEST:
                tar.add(path, arcname=rel, recursive=False)
    return buf.getvalue()


def _reader(stream: IO[bytes], limits: BundleLimits, stored_bytes: int) -> TarReader:
    """A reader of the decompressed ``stream`` that reads at most the unpack budget of
    ``stored_bytes`` plus the headers ``max_members`` members need."""
    headers = limits.max_members * 2 * BLOCK + limits.max_manifest_bytes
    return TarReader(stream, max_extended_bytes=limits.max_header_bytes,
                     max_bytes=limits.unpack_budget(stored_bytes) + headers,
                     stored_bytes=stored_bytes)


def _over_budget(total: int, limits: BundleLimits, budget: int) -> str:
    if total > limits.max_unpacked_bytes:
        return f"bundle unpacks to more than {limits.max_unpacked_bytes} bytes"
    return (f"bundle declares more than {budget} bytes of files, over "
            f"{limits.max_expansion} times its stored size (or "
            f"{limits.expansion_floor_bytes} bytes): refused as a compression bomb")


def _members(reader: TarReader, limits: BundleLimits) -> Iterator[TarMember]:
    """The regular files of ``reader``, each checked against ``limits`` by its header,
    before a byte of its data is read."""
    budget = limits.unpack_budget(reader.stored_bytes)
    total = 0
    for count, member in enumerate(reader, start=1):
        if count > limits.max_members:
            raise BundleError(f"bundle has more than {limits.max_members} members")
        name = check_member_path(member.name)
        if member.isdir:
            continue
        if not member.isfile:
            raise BundleError(
                f"bundle member {name!r}: only regular files are allowed (links and devices "
                "are refused)"
            )
        total += member.size
        if total > budget:
            raise BundleError(_over_budget(total, limits, budget))
        yield member


def _inspect(stream: IO[bytes], limits: BundleLimits, *, stored_bytes: int,
             keep: Mapping[str, int] | None = None,
             owner: tuple[str, str] | None = None) -> BundleContents:
    seen: dict[str, BundleFile] = {}
    kept: dict[str, bytes] = {}
    reader = _reader(stream, limits, stored_bytes)
    members = _members(reader, limits)
    first = next(members, None)
    if first is None:
        raise BundleError(f"bundle has no {MANIFEST}")
    if check_member_path(first.name) != MANIFEST:
        raise BundleError(f"bundle's first member is {first.name!r}, not {MANIFEST} (a "
                          "bundle starts with its manifest)")
    if first.size > limits.max_manifest_bytes:
        raise BundleError(f"{MANIFEST}: {first.size} bytes, over the "
                          f"{limits.max_manifest_bytes}-byte cap")
    manifest = load_json(b"".join(reader.chunks()), what=MANIFEST,
                         max_bytes=limits.max_manifest_bytes,
                         max_containers=limits.max_members + MANIFEST_EXTRA_CONTAINERS)
    listed = _listing(manifest, owner)
    for member in members:
        name = check_member_path(member.name)
        if name in seen or name == MANIFEST:
            raise BundleError(f"bundle member {name!r} appears twice")
        entry = listed.get(name)
        if entry is None:
            raise BundleError(f"bundle member {name!r} is not listed in {MANIFEST}")
        if entry["size"] != member.size:
            raise BundleError(f"bundle member {name!r} holds {member.size} bytes; {MANIFEST} "
                              f"says {entry['size']}")
        digest = hashlib.sha256()
        keeping = keep is not None and name in keep and member.size <= keep[name]
        blocks: list[bytes] = []
        for block in reader.chunks():
            digest.update(block)
            if keeping:
                blocks.append(block)
        if digest.hexdigest() != entry["sha256"]:
            raise BundleError(f"checksum mismatch for {name!r}: the file changed in transit")
        seen[name] = BundleFile(name, member.size, digest.hexdigest())
        if keeping:
            kept[name] = b"".join(blocks)
    missing = sorted(set(listed) - set(seen))
    if missing:
        raise BundleError(f"{MANIFEST} does not match the archive: missing {missing[:20]}")
    return BundleContents(
        run_id=str(manifest.get("run_id", "")),
        node_id=str(manifest.get("node_id", "")),
        files=tuple(seen[n] for n in sorted(seen)),
        manifest=manifest,
        kept=kept,
    )


def _listing(manifest: Any, owner: tuple[str, str] | None) -> dict[str, dict[str, Any]]:
    """The manifest's file entries by path, once its format (and, given ``owner``, its
    run and node) are checked: before any other member is read."""
    if not isinstance(manifest, dict):
        raise BundleError(f"{MANIFEST} is not a JSON object")
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise BundleError(
            f"{MANIFEST}: expected format {FORMAT!r} version {VERSION}, got "
            f"{str(manifest.get('format'))[:100]!r} version "
            f"{str(manifest.get('version'))[:100]!r}"
        )
    if owner is not None and (manifest.get("run_id"), manifest.get("node_id")) != owner:
        raise BundleError(
            f"bundle manifest names run {str(manifest.get('run_id'))[:100]!r} on node "
            f"{str(manifest.get('node_id'))[:100]!r}, but it was uploaded for run "
            f"{owner[0]} on {owner[1]}")
    listed: dict[str, dict[str, Any]] = {}
    entries = manifest.get("files", [])
    if not isinstance(entries, list):
        raise BundleError(f"{MANIFEST}: 'files' is not a list")
    for entry in entries:
        if not isinstance(entry, dict) or not {"path", "size", "sha256"} <= entry.keys():
            raise BundleError(f"{MANIFEST}: malformed file entry {str(entry)[:200]!r}")
        path = check_member_path(str(entry["path"]))
        if path in listed or path == MANIFEST:
            raise BundleError(f"{MANIFEST} lists {path!r} twice")
        listed[path] = cast(dict[str, Any], entry)
    return listed


def inspect_bundle_file(path: Path, limits: BundleLimits | None = None, *,
                        keep: Mapping[str, int] | None = None,
                        owner: tuple[str, str] | None = None) -> BundleContents:
    """Validate the bundle stored at ``path`` and return what it holds, streaming it:
    memory stays within a few chunks plus the manifest, whatever the file holds.
    ``keep``: members whose data to return as well (name -> most bytes kept), so that
    a caller needing a few small files reads the bundle once. ``owner``: the (run,
    node) its manifest must name.

    Raises :class:`BundleError` naming the first problem found.
    """
    with path.open("rb") as raw:
        return inspect_bundle_stream(raw, path.stat().st_size, limits, keep=keep, owner=owner)


def inspect_bundle_stream(raw: IO[bytes], stored_bytes: int,
                          limits: BundleLimits | None = None, *,
                          keep: Mapping[str, int] | None = None,
                          owner: tuple[str, str] | None = None) -> BundleContents:
    """:func:`inspect_bundle_file` for a seekable stream of ``stored_bytes`` bytes."""
    with open_decompressed(raw) as stream:
        return _inspect(stream, limits or BundleLimits(), stored_bytes=stored_bytes,
                        keep=keep, owner=owner)


def inspect_bundle(data: bytes, limits: BundleLimits | None = None) -> BundleContents:
    """:func:`inspect_bundle_file` for a bundle already in memory (the agent's tests)."""
    return inspect_bundle_stream(io.BytesIO(data), len(data), limits)


def read_member(
    path: Path, member: str, *, max_bytes: int, limits: BundleLimits | None = None
) -> bytes | None:
    """The data of ``member`` in the bundle at ``path`` (None when absent), streamed to
    it; a member over ``max_bytes`` raises :class:`BundleError` without being read."""
    limits = limits or BundleLimits()
    with path.open("rb") as raw, open_decompressed(raw) as stream:
        reader = _reader(stream, limits, path.stat().st_size)
        for found in _members(reader, limits):
            if check_member_path(found.name) != member:
                continue
            if found.size > max_bytes:
                raise BundleError(f"{member}: {found.size} bytes, over the {max_bytes}-byte cap")
            return b"".join(reader.chunks())
    return None


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
