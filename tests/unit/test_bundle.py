"""The bundle format: what the agent builds, the orchestrator accepts; hostile or
damaged archives are refused with the member named."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from testbed_common.bundle import (
    BundleError,
    BundleLimits,
    build_bundle,
    inspect_bundle,
    inspect_bundle_file,
)


def _root(tmp: Path) -> Path:
    (tmp / "results").mkdir()
    (tmp / "results" / "tat.json").write_text('{"format": "testbed.tat"}')
    (tmp / "logs").mkdir()
    (tmp / "logs" / "stdout.txt").write_text("hello\n")
    return tmp


def test_round_trip(tmp_path: Path) -> None:
    data = build_bundle(_root(tmp_path), run_id="r-1", node_id="se-01")
    contents = inspect_bundle(data)
    assert (contents.run_id, contents.node_id) == ("r-1", "se-01")
    assert [f.path for f in contents.files] == ["logs/stdout.txt", "results/tat.json"]


def test_truncated_bundle(tmp_path: Path) -> None:
    data = build_bundle(_root(tmp_path), run_id="r-1", node_id="se-01")
    with pytest.raises(BundleError, match="truncated|corrupt|readable"):
        inspect_bundle(data[: len(data) // 2])


def test_tampered_file_fails_checksum(tmp_path: Path) -> None:
    root = _root(tmp_path)
    data = build_bundle(root, run_id="r-1", node_id="se-01")
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data)) as src,
        tarfile.open(fileobj=out, mode="w:gz") as dst,
    ):
        for m in src:
            blob = src.extractfile(m).read()  # type: ignore[union-attr]
            if m.name == "results/tat.json":
                blob = blob.replace(b"tat", b"TAT")
            dst.addfile(m, io.BytesIO(blob))
    with pytest.raises(BundleError, match="checksum mismatch for 'results/tat.json'"):
        inspect_bundle(out.getvalue())


def test_zip_bomb_limit(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"\0" * 2_000_000)
    data = build_bundle(tmp_path, run_id="r", node_id="n")
    assert len(data) < 20_000
    with pytest.raises(BundleError, match="unpacks to more than"):
        inspect_bundle(data, BundleLimits(max_unpacked_bytes=1_000_000))


def test_missing_manifest() -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo("results/x")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(BundleError, match="first member is 'results/x', not manifest.json"):
        inspect_bundle(out.getvalue())


def test_unlisted_file(tmp_path: Path) -> None:
    manifest = {"format": "testbed.bundle", "version": 1, "files": []}
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, blob in (("manifest.json", json.dumps(manifest).encode()), ("extra", b"1")):
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    with pytest.raises(BundleError, match="'extra' is not listed in manifest.json"):
        inspect_bundle(out.getvalue())


def test_safe_extract_keeps_files_skips_links_refuses_traversal(tmp_path: Path) -> None:
    from testbed_common.bundle import safe_extract

    def tar_of(*members: tuple[str, bytes]) -> tarfile.TarFile:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, kind in members:
                info = tarfile.TarInfo(name)
                info.type = kind
                if kind == tarfile.SYMTYPE:
                    info.linkname = "/etc/passwd"
                    tar.addfile(info)
                else:
                    info.size = 2
                    tar.addfile(info, io.BytesIO(b"ok"))
        buf.seek(0)
        return tarfile.open(fileobj=buf)

    with tar_of(("results/a.json", tarfile.REGTYPE), ("results/l", tarfile.SYMTYPE)) as tar:
        assert safe_extract(tar, tmp_path) == ["results/l"]
    assert (tmp_path / "results/a.json").read_bytes() == b"ok"
    assert not (tmp_path / "results/l").exists()
    with tar_of(("../evil", tarfile.REGTYPE)) as tar, pytest.raises(BundleError):
        safe_extract(tar, tmp_path / "x")
    assert not (tmp_path / "evil").exists()


def test_inspection_keeps_the_members_asked_for_within_their_caps(tmp_path: Path) -> None:
    """One pass both checks the bundle and returns the small files its caller reads."""
    root = tmp_path / "run"
    (root / "meta").mkdir(parents=True)
    (root / "meta" / "run.json").write_text('{"bytes_used": 5}')
    (root / "results").mkdir()
    (root / "results" / "big.json").write_bytes(b"x" * 2000)
    data = build_bundle(root, run_id="r1", node_id="n1")
    path = tmp_path / "b.tar.gz"
    path.write_bytes(data)
    contents = inspect_bundle_file(
        path, keep={"meta/run.json": 100, "results/big.json": 1000, "results/none.json": 9})
    assert contents.kept == {"meta/run.json": b'{"bytes_used": 5}'}
    assert {f.path for f in contents.files} == {"meta/run.json", "results/big.json"}
