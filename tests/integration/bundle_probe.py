"""Bundles of every shape, hostile and legitimate, built on disk without holding one
whole; and an orchestrator to upload them to, in a process of its own.

``python -m tests.integration.bundle_probe WORKDIR PORT`` serves the orchestrator;
``test_bundle_memory.py`` uploads each bundle of :data:`CASES` to it over HTTP and
reads the server's peak resident set (VmHWM, which counts C allocations too) around
each upload.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from orchestrator.api.app import create_app
from testbed_common.bundle import build_bundle
from tests.conftest import ManualClock
from tests.integration.conftest import make_settings

MiB = 1024**2
GiB = 1024**3
NODE = "se-01"


def _header(name: str, *, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.GNU_FORMAT)


def _zeros(n: int) -> Iterator[bytes]:
    block = bytes(MiB)
    while n > 0:
        yield block[: min(n, MiB)]
        n -= MiB


def _write_gz(path: Path, parts: Iterable[bytes]) -> Path:
    with gzip.open(path, "wb", compresslevel=1) as f:
        for part in parts:
            f.write(part)
    return path


def _extended_bomb(path: Path, kind: bytes) -> Path:
    """A GNU long name ('L') or pax header ('x') that declares, and holds, 1 GiB of
    zeros (~1 MB gzip'd), in front of a small regular member."""
    return _write_gz(path, [
        _header("././@LongLink" if kind == b"L" else "pax", kind=kind, size=GiB),
        *_zeros(GiB), _header("results/x", kind=tarfile.REGTYPE, size=0), bytes(1024)])


def _declared_huge(path: Path) -> Path:
    """A member whose header declares 3 GiB (past the unpacked cap)."""
    return _write_gz(path, [_header("results/zeros", kind=tarfile.REGTYPE, size=3 * GiB),
                            *_zeros(64 * MiB)])


def _too_many(path: Path, run_id: str) -> Path:
    """5,001 empty files, each listed in the manifest in front of them."""
    names = [f"results/f{i}" for i in range(5_001)]
    empty = hashlib.sha256(b"").hexdigest()
    manifest = json.dumps({"format": "testbed.bundle", "version": 1, "run_id": run_id,
                           "node_id": NODE, "files": [{"path": n, "size": 0, "sha256": empty}
                                                      for n in names]}).encode()
    parts = [_header(n, kind=tarfile.REGTYPE, size=0) for n in names]
    head = _header("manifest.json", kind=tarfile.REGTYPE, size=len(manifest))
    return _write_gz(path, [head, manifest, bytes(-len(manifest) % 512), *parts,
                            bytes(1024)])


def _manifest_bomb(path: Path, run_id: str, body: bytes, *, then: int = 0) -> Path:
    """A bundle whose manifest is ``body``, followed by ``then`` random bytes (so that
    the parsed manifest is held while they are hashed, all in one chunk)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
        if then:
            info = tarfile.TarInfo("results/random.bin")
            info.size = then
            tar.addfile(info, io.BytesIO(os.urandom(then)))
    path.write_bytes(buf.getvalue())
    return path


def _legit(path: Path, run_id: str, files: Callable[[Path], None]) -> Path:
    root = path.with_suffix(".d")
    (root / "results").mkdir(parents=True)
    (root / "results" / "tat.json").write_text(json.dumps({"format": "testbed.tat"}))
    files(root)
    path.write_bytes(build_bundle(root, run_id=run_id, node_id=NODE))
    return path


def _random(root: Path) -> None:
    with (root / "results" / "random.bin").open("wb") as f:
        for _ in range(96):
            f.write(os.urandom(MiB))


def _sparse_zeros(size: int) -> Callable[[Path], None]:
    def write(root: Path) -> None:
        with (root / "results" / "zeros.bin").open("wb") as f:
            f.truncate(size)
    return write


def _many(root: Path) -> None:
    for i in range(4_900):
        (root / "results" / f"s{i:05}.json").write_text("{}")


#: name -> (builder of the bundle file for a run id, what the upload must answer)
Builder = Callable[[Path, str], Path]
CASES: dict[str, tuple[Builder, str]] = {
    "gnu-longname-bomb": (lambda p, r: _extended_bomb(p, b"L"), "long name"),
    "pax-header-bomb": (lambda p, r: _extended_bomb(p, b"x"), "pax header"),
    "declared-3-gib-member": (lambda p, r: _declared_huge(p), "unpacks to more than"),
    "5001-members": (_too_many, "more than 5000 members"),
    "manifest-deep-nesting": (
        lambda p, r: _manifest_bomb(p, r, b'{"a":[' * 2_000 + b"]}" * 2_000),
        "nested deeper"),
    "manifest-1-mib-of-objects": (
        lambda p, r: _manifest_bomb(p, r, b"[" + b"{}," * 349_000 + b"{}]"),
        "more than 5256 objects"),
    "manifest-1-mib-of-numbers": (
        lambda p, r: _manifest_bomb(p, r, b"[" + b"1000," * 209_000 + b"1]"),
        "not a JSON object"),
    "manifest-of-numbers-then-14-mib-in-one-chunk": (
        lambda p, r: _manifest_bomb(p, r, b"[" + b"1000," * 209_000 + b"1]", then=14 * MiB),
        "not a JSON object"),
    "manifest-over-its-cap": (
        lambda p, r: _manifest_bomb(p, r, b" " * (1024**2 + 1)), "over the 1048576-byte cap"),
    "legit-96-mib-random": (lambda p, r: _legit(p, r, _random), "complete"),
    "768-mib-zeros-a-compression-bomb": (lambda p, r: _legit(p, r, _sparse_zeros(768 * MiB)),
                                         "compression bomb"),
    "legit-48-mib-zeros": (lambda p, r: _legit(p, r, _sparse_zeros(48 * MiB)), "complete"),
    "legit-4900-files": (lambda p, r: _legit(p, r, _many), "complete"),
}


def serve(work: Path, port: int) -> None:
    """The orchestrator on ``port``, its state under ``work`` (run in a process of its
    own: its peak resident set is then the server's alone)."""
    import uvicorn

    app = create_app(make_settings(work), clock=ManualClock(), reaper=False)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]))
