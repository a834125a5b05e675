"""A release's files: tables as CSV and Parquet, metadata, checksums; and their check.

Byte for byte reproducible: the same rows give the same files. CSV is written by hand
(fixed quoting, ``\\n`` line ends, floats as Python's shortest round-trip text, times
as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``); Parquet with fixed writer options (zstd level 3,
format 2.6, data page v1, statistics on), whose footer carries the library's name and
version but no time. No file holds the time of the build, files are written in sorted
order, and SHA256SUMS closes the release.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from orchestrator.dataset import metadata as M
from orchestrator.dataset.contrib import release_tables
from orchestrator.dataset.release import Release, changelog
from orchestrator.dataset.room import SMALLER
from orchestrator.dataset.tables import SCHEMA_VERSION, Row, TableSpec, sorted_rows
from orchestrator.errors import NoSpace

_ARROW = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(),
          "datetime": pa.timestamp("us", tz="UTC")}


def _iso(us: int) -> str:
    seconds, micros = divmod(us, 1_000_000)
    when = datetime.fromtimestamp(seconds, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S") + f".{micros:06d}Z"


def _cell(value: Any, type_: str) -> str:
    if value is None:
        return ""
    if type_ == "datetime":
        return _iso(int(value))
    if type_ == "number":
        return repr(float(value))
    return str(value)


def csv_bytes(spec: TableSpec, rows: Sequence[Row]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    writer.writerow(spec.names)
    for row in rows:
        writer.writerow([_cell(row.get(c.name), c.type) for c in spec.columns])
    return out.getvalue().encode()


def arrow_schema(spec: TableSpec) -> pa.Schema:
    return pa.schema([
        pa.field(c.name, _ARROW[c.type], nullable=True,
                 metadata={"description": c.description, "unit": c.unit})
        for c in spec.columns], metadata={"table": spec.name, "schema_version": SCHEMA_VERSION})


def _arrow_value(value: Any, type_: str) -> Any:
    if value is None:
        return None
    return {"integer": int, "number": float, "string": str, "datetime": int}[type_](value)


def parquet_bytes(spec: TableSpec, rows: Sequence[Row]) -> bytes:
    schema = arrow_schema(spec)
    columns = [pa.array([_arrow_value(r.get(c.name), c.type) for r in rows],
                        type=pa.int64() if c.type == "datetime" else _ARROW[c.type])
               for c in spec.columns]
    columns = [col.cast(_ARROW[c.type]) if c.type == "datetime" else col
               for col, c in zip(columns, spec.columns, strict=True)]
    table = pa.Table.from_arrays(columns, schema=schema)
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd", compression_level=3, version="2.6",
                   data_page_version="1.0", write_statistics=True, use_dictionary=True,
                   row_group_size=1 << 20)
    return out.getvalue()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _previous(previous: Path | None) -> tuple[str | None, dict[str, int] | None, str]:
    if previous is None:
        return None, None, ""
    doc = json.loads((previous / M.DESCRIPTOR).read_text())
    counts = {}
    for spec in release_tables():
        path = previous / "tables" / f"{spec.name}.csv"
        if path.exists():
            counts[spec.name] = max(0, len(path.read_bytes().splitlines()) - 1)
    log = previous / M.CHANGELOG
    return str(doc.get("version")), counts, log.read_text() if log.exists() else ""


#: Called with every file of a release before the first is written; raises to stop it.
RoomCheck = Callable[[Mapping[str, bytes]], None]


def write_release(out: Path, release: Release, rows: Mapping[str, list[Row]],
                  extra: Mapping[str, bytes], *, previous: Path | None,
                  room: RoomCheck | None = None) -> dict[str, int]:
    """Every file of the release under ``out`` (absent or empty); returns rows per
    table. ``room`` sees the files first (:func:`orchestrator.services.datasets.check_room`).
    A write that fails (the disk filled meanwhile: :class:`NoSpace`) leaves ``out`` as
    it was: no partial release."""
    files: dict[str, bytes] = dict(extra)
    counts = {}
    tables = release_tables()
    for spec in tables:
        ordered = sorted_rows(spec, rows.get(spec.name, []))
        counts[spec.name] = len(ordered)
        files[f"tables/{spec.name}.csv"] = csv_bytes(spec, ordered)
        files[f"tables/{spec.name}.parquet"] = parquet_bytes(spec, ordered)
    before_version, before_counts, older = _previous(previous)
    files[M.CHANGELOG] = changelog(release.version, before_version, counts, before_counts,
                                   older).encode()
    files[M.CITATION] = M.citation(release)
    files[M.README] = M.readme(release, counts, tables)
    sizes = {p: (len(d), _digest(d)) for p, d in files.items()}
    files[M.DESCRIPTOR] = M.descriptor_bytes(M.descriptor(release, tables, sizes))
    files[M.CHECKSUMS] = M.checksums({p: _digest(d) for p, d in files.items()})
    if room is not None:
        room(files)
    _write_all(out, files)
    return counts


def _write_all(out: Path, files: Mapping[str, bytes]) -> None:
    existed = out.exists()
    try:
        for path in sorted(files):
            target = out / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(files[path])
    except BaseException as e:
        _unwrite(out, existed=existed, made={p.split("/", 1)[0] for p in files})
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpace(f"{out}: the disk filled while the release was written "
                          f"({e.strerror}); nothing of it was kept: free space there, or "
                          f"{SMALLER}, and build again") from e
        raise


def _unwrite(out: Path, *, existed: bool, made: set[str]) -> None:
    """Remove what a failed write made: ``out`` itself when it was made here, else the
    release's top-level entries in it (an empty folder given for the release)."""
    if not existed:
        shutil.rmtree(out, ignore_errors=True)
        return
    for name in made:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)


# --- verify -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    problems: list[str]
    files: int

    @property
    def ok(self) -> bool:
        return not self.problems


def _check_sums(root: Path) -> tuple[list[str], int]:
    sums = root / M.CHECKSUMS
    if not sums.exists():
        return [f"{M.CHECKSUMS} is missing: this folder is not a complete release"], 0
    listed, problems = M.parse_checksums(sums.read_text())
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    present.discard(M.CHECKSUMS)
    for path in sorted(set(listed) - present):
        problems.append(f"{path}: listed in {M.CHECKSUMS} but missing")
    for path in sorted(present - set(listed)):
        problems.append(f"{path}: not in {M.CHECKSUMS} (added after the build?)")
    for path in sorted(set(listed) & present):
        got = _digest((root / path).read_bytes())
        if got != listed[path]:
            problems.append(f"{path}: SHA-256 {got} differs from {listed[path]} in "
                            f"{M.CHECKSUMS} (changed or damaged)")
    return problems, len(present)


def _check_descriptor(root: Path) -> list[str]:
    from frictionless import FrictionlessException, Package, system

    path = root / M.DESCRIPTOR
    if not path.exists():
        return [f"{M.DESCRIPTOR} is missing"]
    try:
        doc = json.loads(path.read_text())
    except ValueError as e:
        return [f"{M.DESCRIPTOR} is not JSON: {e}"]
    problems = []
    if doc.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"{M.DESCRIPTOR}: schema_version {doc.get('schema_version')!r}, this "
                        f"testbed reads {SCHEMA_VERSION!r}")
    try:
        with system.use_context(trusted=False):
            report = Package(str(path), basepath=str(root)).validate()
    except FrictionlessException as e:
        return [*problems, f"{M.DESCRIPTOR}: {e.error.message}"]
    for task in report.tasks:
        for error in task.errors:
            problems.append(f"{task.name}: {error.message}")
    for error in report.errors:
        problems.append(f"{M.DESCRIPTOR}: {error.message}")
    return problems


def _check_tables(root: Path) -> list[str]:
    problems = []
    for spec in release_tables():
        csv_path = root / "tables" / f"{spec.name}.csv"
        pq_path = root / "tables" / f"{spec.name}.parquet"
        if not csv_path.exists() or not pq_path.exists():
            problems.append(f"table {spec.name}: {csv_path.name} or {pq_path.name} is missing")
            continue
        header = csv_path.read_text().split("\n", 1)[0].split(",")
        if tuple(header) != spec.names:
            problems.append(f"tables/{csv_path.name}: columns {header} are not the schema's "
                            f"{list(spec.names)}")
        try:
            schema = pq.read_schema(pq_path)
        except (pa.ArrowException, OSError) as e:
            problems.append(f"tables/{pq_path.name}: not a Parquet file ({e})")
            continue
        want = arrow_schema(spec)
        for field in want:
            got = schema.field(field.name) if field.name in schema.names else None
            if got is None:
                problems.append(f"tables/{pq_path.name}: no column {field.name}")
            elif got.type != field.type:
                problems.append(f"tables/{pq_path.name}: column {field.name} is {got.type}, "
                                f"the schema says {field.type}")
        if len(schema.names) != len(want.names):
            problems.append(f"tables/{pq_path.name}: {len(schema.names)} columns, the schema "
                            f"has {len(want.names)}")
    return problems


def verify_release(root: Path) -> Verdict:
    """Every problem of the release at ``root``: checksums, descriptor, tables' schema."""
    if not root.is_dir():
        return Verdict([f"{root} is not a folder"], 0)
    problems, files = _check_sums(root)
    problems += _check_descriptor(root)
    problems += _check_tables(root)
    return Verdict(problems, files)
