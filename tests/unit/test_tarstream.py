"""The streaming tar reader: what tarfile writes is read back alike (GNU and pax long
names, ustar prefixes, plain and gzip'd); headers that announce more than a cap are
refused before what they announce is read."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from testbed_common.bundle import (
    BundleError,
    BundleLimits,
    build_bundle,
    inspect_bundle,
    inspect_bundle_file,
    read_member,
)
from testbed_common.tarstream import TarReader, open_decompressed

LONG = "results/" + "d" * 120 + "/" + "f" * 130 + ".json"


def _tar(members: list[tuple[str, bytes]], fmt: int, *, gz: bool = True) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _read(data: bytes) -> list[tuple[str, int, bytes]]:
    with open_decompressed(io.BytesIO(data)) as stream:
        reader = TarReader(stream)
        return [(m.name, m.size, b"".join(reader.chunks())) for m in reader]


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
@pytest.mark.parametrize("gz", [True, False])
def test_reads_what_tarfile_writes(fmt: int, gz: bool) -> None:
    name = LONG if fmt != tarfile.USTAR_FORMAT else "results/" + "p" * 120 + "/x.json"
    members = [("manifest.json", b"{}"), (name, b"x" * 70_000), ("empty", b"")]
    assert _read(_tar(members, fmt, gz=gz)) == [(n, len(d), d) for n, d in members]


def _header(name: str, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.GNU_FORMAT)


@pytest.mark.parametrize(("kind", "label"), [(b"L", "long name"), (b"K", "long name"),
                                             (b"x", "pax header"), (b"g", "pax header")])
def test_an_extended_header_over_its_cap_is_refused_before_it_is_read(
    kind: bytes, label: str
) -> None:
    # declares 1 GiB and holds none of it: tarfile would wait for it; refused at once
    data = gzip.compress(_header("././@LongLink", kind, 1024**3))
    with pytest.raises(BundleError, match=f"1073741824-byte {label}; at most 65536"):
        inspect_bundle(data)


def test_a_global_pax_header_may_not_rename_members() -> None:
    record = b"path=evil\n"
    body = f"{len(record) + 3} ".encode() + record
    data = _header("pax", b"g", len(body)) + body.ljust(512, b"\0") + bytes(1024)
    with pytest.raises(BundleError, match="global pax header"):
        inspect_bundle(data)


def test_sizes_past_8_gib_are_read_in_base_256_and_capped() -> None:
    header = _header("results/huge", b"0", 9 * 1024**3)
    assert header[124] == 0x80  # base-256
    with pytest.raises(BundleError, match="unpacks to more than 2147483648"):
        inspect_bundle(header)


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE,
                                  tarfile.FIFOTYPE, tarfile.GNUTYPE_SPARSE])
def test_only_regular_files_and_folders(kind: bytes) -> None:
    data = _header("results/x", kind, 0) + bytes(1024)
    with pytest.raises(BundleError, match="only regular files"):
        inspect_bundle(data)


def test_a_damaged_header_is_refused() -> None:
    data = bytearray(_tar([("manifest.json", b"{}")], tarfile.PAX_FORMAT, gz=False))
    data[10] ^= 0xFF
    with pytest.raises(BundleError, match="damaged"):
        inspect_bundle(bytes(data))


def test_member_count_is_capped_from_headers() -> None:
    # folders: counted, and needing no manifest entry
    data = b"".join(_header(f"results/{i}", b"5", 0) for i in range(11)) + bytes(1024)
    with pytest.raises(BundleError, match="more than 10 members"):
        inspect_bundle(data, BundleLimits(max_members=10))


def test_the_manifest_is_capped_and_bounded(tmp_path: Path) -> None:
    for body, needle in ((b" " * (1024**2 + 1), "over the 1048576-byte cap"),
                         (b"[" * 100 + b"]" * 100, "nested deeper than 64"),
                         (b"[" + b"{}," * 6000 + b"{}]", "more than 5256 objects")):
        with pytest.raises(BundleError, match=needle):
            inspect_bundle(_tar([("manifest.json", body)], tarfile.PAX_FORMAT))


def test_inspects_a_stored_file_and_reads_one_member_under_a_cap(tmp_path: Path) -> None:
    root = tmp_path / "run"
    (root / "results").mkdir(parents=True)
    (root / "results" / LONG.split("/", 1)[1].split("/")[0]).mkdir()
    (root / LONG).write_text('{"mean_bps": 5}')
    path = tmp_path / "b.tar.gz"
    path.write_bytes(build_bundle(root, run_id="r", node_id="n"))
    assert [f.path for f in inspect_bundle_file(path).files] == [LONG]
    assert read_member(path, LONG, max_bytes=100) == b'{"mean_bps": 5}'
    assert read_member(path, "results/absent", max_bytes=100) is None
    with pytest.raises(BundleError, match="over the 4-byte cap"):
        read_member(path, LONG, max_bytes=4)
