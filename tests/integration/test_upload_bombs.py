"""An upload costs at most a small multiple of its own bytes in CPU and memory, whatever
it declares or decompresses to, and a bundle is refused at the first member that breaks
the format, not after reading it all.

Two levels, both on real files: the inspector on a stored bundle, counting the bytes it
reads (a malformed first member followed by a large valid tail is refused before the
tail is read); and the API, where each hostile bundle is uploaded in chunks and refused
with a reason that says what is wrong, while the process's CPU time and peak memory
(tracemalloc, which sees zlib's buffers too) stay within a small multiple of the
upload's size."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.api.app import create_app
from testbed_common import wire
from testbed_common.bundle import (
    FORMAT,
    VERSION,
    BundleError,
    BundleLimits,
    inspect_bundle_stream,
    sha256_bytes,
    sha256_file,
)
from tests.conftest import ManualClock
from tests.integration.conftest import Api, make_settings

MiB = 1024**2
GiB = 1024**3
NODE = "se-01"
URL = wire.AGENT_PREFIX + "/runs/{}/bundle"
#: The tail behind a malformed first member: incompressible, so that reading it would
#: show in the bytes read.
TAIL = 24 * MiB


# --- building bundles, member by member ------------------------------------------------

def _member(name: str, data: bytes = b"", *, kind: bytes = tarfile.REGTYPE,
            size: int | None = None, pax: dict[str, str] | None = None,
            linkname: str = "") -> bytes:
    """One tar member (header, data, padding); ``size`` may lie about the data."""
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, len(data) if size is None else size, linkname
    if pax:
        info.pax_headers = pax
    header = info.tobuf(format=tarfile.PAX_FORMAT if pax else tarfile.GNU_FORMAT)
    return header + data + bytes(-len(data) % 512)


def _manifest(run_id: str, files: dict[str, tuple[int, str]], **over: Any) -> bytes:
    doc = {"format": FORMAT, "version": VERSION, "run_id": run_id, "node_id": NODE,
           "files": [{"path": p, "size": n, "sha256": h} for p, (n, h) in files.items()],
           **over}
    return _member("manifest.json", json.dumps(doc).encode())


def _entry(data: bytes) -> tuple[int, str]:
    return len(data), sha256_bytes(data)


def _gz(path: Path, parts: Iterator[bytes] | list[bytes], *, isize: int | None = None
        ) -> Path:
    """``parts`` gzip'd to ``path``; ``isize``: a forged size in the gzip trailer."""
    with gzip.open(path, "wb", compresslevel=6) as f:
        for part in parts:
            f.write(part)
        f.write(bytes(1024))
    if isize is not None:
        with path.open("r+b") as f:
            f.seek(-4, os.SEEK_END)
            f.write(isize.to_bytes(4, "little"))
    return path


def _zeros(n: int) -> Iterator[bytes]:
    while n > 0:
        yield bytes(min(n, MiB))
        n -= MiB


# --- the inspector: refused at the first bad member, before the tail is read -----------

class Counting(io.FileIO):
    """A file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        data = super().read(size)
        self.read_bytes += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        n = super().readinto(buffer)
        self.read_bytes += n or 0
        return n or 0


def _with_tail(path: Path, run_id: str, first: Callable[[bytes], list[bytes]]) -> Path:
    """A bundle whose first members are ``first(tail)``, then a valid 24 MiB member."""
    tail = os.urandom(TAIL)
    return _gz(path, [*first(tail), _member("results/tail.bin", tail)])


RUN = "r-1"
FIRST_BAD: dict[str, tuple[Callable[[bytes], list[bytes]], str]] = {
    "manifest of another format": (
        lambda t: [_manifest(RUN, {"results/tail.bin": _entry(t)}, format="zip")],
        "expected format"),
    "manifest of another run": (
        lambda t: [_manifest("r-2", {"results/tail.bin": _entry(t)})], "names run 'r-2'"),
    "manifest listing a path escape": (
        lambda t: [_manifest(RUN, {"../../etc/x": _entry(t)})], "traversal"),
    "first member not the manifest": (
        lambda t: [_member("results/a", b"a"), _manifest(RUN, {})], "not manifest.json"),
    "member not listed": (
        lambda t: [_manifest(RUN, {"results/tail.bin": _entry(t)}),
                   _member("results/extra", b"x")], "'results/extra' is not listed"),
    "member of another size than listed": (
        lambda t: [_manifest(RUN, {"results/a": (5, sha256_bytes(b"aaaaa")),
                                   "results/tail.bin": _entry(t)}),
                   _member("results/a", b"aaaa")], "holds 4 bytes"),
    "member of another checksum than listed": (
        lambda t: [_manifest(RUN, {"results/a": _entry(b"good"),
                                   "results/tail.bin": _entry(t)}),
                   _member("results/a", b"evil")], "checksum mismatch for 'results/a'"),
    "damaged header": (
        lambda t: [_manifest(RUN, {"results/tail.bin": _entry(t)}),
                   b"X" + _member("results/a", b"a")[1:]], "damaged (checksum)"),
    "a link": (
        lambda t: [_manifest(RUN, {"results/tail.bin": _entry(t)}),
                   _member("results/l", kind=tarfile.SYMTYPE, linkname="/etc/passwd")],
        "only regular files"),
}


@pytest.mark.parametrize("case", list(FIRST_BAD))
def test_a_bad_first_member_is_refused_before_the_tail_is_read(case: str,
                                                               tmp_path: Path) -> None:
    first, needle = FIRST_BAD[case]
    path = _with_tail(tmp_path / "b.tar.gz", RUN, first)
    stored = path.stat().st_size
    assert stored > TAIL  # the tail is there, incompressible
    with Counting(path, "rb") as raw:
        with pytest.raises(BundleError, match=re.escape(needle)):
            inspect_bundle_stream(raw, stored, owner=(RUN, NODE))  # type: ignore[arg-type]
        read = raw.read_bytes
    # what gzip buffers (128 KiB reads) past the small head, never the 24 MiB tail
    assert read < 1 * MiB, f"{case}: read {read} of {stored} bytes"


def test_the_same_bundle_without_the_fault_is_read_whole(tmp_path: Path) -> None:
    """The control: a valid bundle with that tail is read to its end and accepted."""
    path = _with_tail(tmp_path / "b.tar.gz", RUN, lambda t: [
        _manifest(RUN, {"results/a": _entry(b"good"), "results/tail.bin": _entry(t)}),
        _member("results/a", b"good")])
    with Counting(path, "rb") as raw:
        contents = inspect_bundle_stream(raw, path.stat().st_size,  # type: ignore[arg-type]
                                         owner=(RUN, NODE))
        assert raw.read_bytes >= TAIL
    assert [f.path for f in contents.files] == ["results/a", "results/tail.bin"]


def test_the_unpack_budget_is_a_multiple_of_the_stored_bytes() -> None:
    limits = BundleLimits()
    assert limits.unpack_budget(1000) == limits.expansion_floor_bytes
    assert limits.unpack_budget(10 * MiB) == limits.max_expansion * 10 * MiB
    assert limits.unpack_budget(10 * GiB) == limits.max_unpacked_bytes


# --- the API: hostile uploads cost a small multiple of their bytes ---------------------

def zeros_declared_small(path: Path, run_id: str) -> Path:
    """1 GiB of zeros in one listed member (1 MB gzip'd); gzip's trailer says 1 KiB."""
    zeros_sha = hashlib.sha256()
    for block in _zeros(GiB):
        zeros_sha.update(block)
    return _gz(path, [_manifest(run_id, {"results/zeros": (GiB, zeros_sha.hexdigest())}),
                      _member("results/zeros", size=GiB)[:512], *_zeros(GiB)], isize=1024)


def declared_huge(path: Path, run_id: str) -> Path:
    """A member whose header claims 3 GiB, with 1 MiB behind it."""
    return _gz(path, [_manifest(run_id, {"results/z": (3 * GiB, "0" * 64)}),
                      _member("results/z", size=3 * GiB)[:512], *_zeros(MiB)])


def _pax_record(key: str, value: str) -> bytes:
    """One ``"LEN key=value\n"`` record, LEN counting itself."""
    body = f" {key}={value}\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n += 1
    return f"{n}{body}".encode()


def pax_padding(path: Path, run_id: str) -> Path:
    """Every member behind 4 pax headers of 60 KiB each (allowed one by one), 400
    members: 94 MiB of headers from a few hundred kB."""
    record = _pax_record("comment", "x" * (60 * 1024))
    files = {f"results/f{i}": _entry(b"") for i in range(400)}
    parts = [_manifest(run_id, files)]
    for name in files:
        parts += [_member("pax", record, kind=tarfile.XHDTYPE)] * 4
        parts.append(_member(name))
    return _gz(path, parts)


def nested_archive(path: Path, run_id: str) -> Path:
    """A member that is itself a gzip bomb (1 GiB of zeros): kept as it is, never
    expanded."""
    inner = io.BytesIO()
    with gzip.GzipFile(fileobj=inner, mode="wb", compresslevel=9) as f:
        for block in _zeros(GiB):
            f.write(block)
    data = inner.getvalue()
    return _gz(path, [_manifest(run_id, {"results/inner.tar.gz": _entry(data)}),
                      _member("results/inner.tar.gz", data)])


def many_members(path: Path, run_id: str) -> Path:
    files = {f"results/f{i}": _entry(b"") for i in range(5_001)}
    return _gz(path, [_manifest(run_id, files), *(_member(n) for n in files)])


def path_escape(path: Path, run_id: str) -> Path:
    return _gz(path, [_manifest(run_id, {}), _member("../../escape.txt", b"x")])


def a_link(path: Path, run_id: str) -> Path:
    return _gz(path, [_manifest(run_id, {}),
                      _member("results/l", kind=tarfile.LNKTYPE, linkname="/etc/passwd")])


def bad_first_then_tail(path: Path, run_id: str) -> Path:
    return _with_tail(path, run_id, lambda t: [
        _manifest(run_id, {"results/tail.bin": _entry(t)}), _member("results/x", b"x")])


#: name -> (builder, what the answer says: a refusal's words, or "complete")
UPLOADS: dict[str, tuple[Callable[[Path, str], Path], str]] = {
    "gzip of zeros declaring 1 KiB": (zeros_declared_small, "compression bomb"),
    "member claiming 3 GiB": (declared_huge, "unpacks to more than"),
    "pax headers padding 400 members": (pax_padding, "decompresses to more than"),
    "5,001 tiny members": (many_members, "more than 5000 members"),
    "path escape": (path_escape, "traversal"),
    "hard link": (a_link, "only regular files"),
    "bad first member, 24 MiB tail": (bad_first_then_tail, "'results/x' is not listed"),
    "nested gzip bomb, kept unexpanded": (nested_archive, "complete"),
}

#: Peak memory of one upload: what the route holds of a chunk (twice), the inspector's
#: few 64 KiB blocks and zlib's window, and the app's own allocations per request.
CHUNK = 1 * MiB
FLOOR_BYTES = 16 * MiB
#: CPU of one upload: a fixed cost (the requests, the database) plus a small multiple
#: of its bytes (hashing and writing them, and decompressing at most the budget).
FLOOR_CPU_S = 2.0
CPU_S_PER_MIB = 0.05


@pytest.fixture
def app_api(tmp_path: Path, clock: ManualClock) -> Iterator[Api]:
    settings = make_settings(tmp_path)
    app = create_app(settings, clock=clock, reaper=False)
    with TestClient(app) as client:
        yield Api(client, clock, settings)
    app.state.ctx.db.engine.dispose()


def _upload(api: Api, token: str, run_id: str, path: Path) -> Any:
    digest = sha256_file(path)  # streamed: the client shares the process measured
    r = api.client.post(URL.format(run_id), headers=api.node(token),
                        json={"size": path.stat().st_size, "sha256": digest})
    assert r.status_code == 200, r.text
    offset = 0
    with path.open("rb") as f:
        while block := f.read(CHUNK):
            r = api.client.patch(URL.format(run_id), content=block, headers={
                **api.node(token), wire.UPLOAD_OFFSET_HEADER: str(offset)})
            offset += len(block)
            if r.status_code != 200:
                break
    return r


def _cost(fn: Callable[[], Any]) -> tuple[Any, float, int]:
    tracemalloc.start()
    started = time.process_time()
    try:
        out = fn()
        return out, time.process_time() - started, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_hostile_uploads_cost_a_small_multiple_of_their_bytes(app_api: Api,
                                                               tmp_path: Path) -> None:
    api = app_api
    token = api.add_node(NODE, [("op0", "240-01", "Telia")])
    figures = {}
    failures = []
    for name, (build, expected) in UPLOADS.items():
        run = api.submit(NODE)["id"]
        api.heartbeat(token)
        for state in ("deploying", "running", "uploading"):
            assert api.report(token, run, state).status_code == 204
        path = build(tmp_path / "bundle.tar.gz", run)
        size = path.stat().st_size
        r, cpu, peak = _cost(lambda: _upload(api, token, run, path))  # noqa: B023
        figures[name] = (size, round(cpu, 2), peak // 1024)
        if expected == "complete":
            if not (r.status_code == 200 and r.json()["complete"]):
                failures.append(f"{name}: {r.status_code} {r.text[:300]}")
        elif not (r.status_code == 422 and expected in r.json()["detail"]
                  and r.json()["fault"] == "refused"):
            failures.append(f"{name}: wanted 422 saying {expected!r}, got "
                            f"{r.status_code} {r.text[:300]}")
        if cpu > FLOOR_CPU_S + CPU_S_PER_MIB * size / MiB:
            failures.append(f"{name}: {cpu:.2f} s of CPU for {size} bytes")
        if peak > FLOOR_BYTES + 3 * CHUNK:
            failures.append(f"{name}: peak {peak} bytes for {size} bytes")
        path.unlink()
    print(figures)  # (bytes uploaded, CPU seconds, peak KiB): docs/security.md
    assert not failures, "\n".join(failures)
