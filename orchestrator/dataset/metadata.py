"""A release's metadata: datapackage.json, CITATION.cff, README.md and SHA256SUMS (pure).

Why a Frictionless Data Package and not an RO-Crate: the release is tables first, and
a Data Package's Table Schema says each column's type and unit and lets a validator
check every row against them (``frictionless validate``, and ``testbed dataset
verify``); an RO-Crate describes files and their provenance but not the columns
inside them. The CSV tables are its tabular resources; the Parquet twins and the raw
files are plain file resources with their size and SHA-256, so they are checked too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from orchestrator.dataset.release import LICENCES, Release
from orchestrator.dataset.tables import SCHEMA_VERSION, TableSpec

DESCRIPTOR = "datapackage.json"
CHECKSUMS = "SHA256SUMS"
CITATION = "CITATION.cff"
README = "README.md"
CHANGELOG = "CHANGELOG.md"
MEDIATYPES = {"csv": "text/csv", "parquet": "application/vnd.apache.parquet",
              "pcap": "application/vnd.tcpdump.pcap", "json": "application/json",
              "yaml": "application/yaml", "md": "text/markdown"}


def table_schema(spec: TableSpec) -> dict[str, Any]:
    fields = []
    for c in spec.columns:
        f: dict[str, Any] = {"name": c.name, "type": c.type, "description": c.describe()}
        if c.unit:
            f["unit"] = c.unit
        if c.type == "datetime":
            f["format"] = "%Y-%m-%dT%H:%M:%S.%fZ"
        fields.append(f)
    return {"fields": fields, "missingValues": [""]}


def descriptor(release: Release, tables: Sequence[TableSpec],
               files: Mapping[str, tuple[int, str]]) -> dict[str, Any]:
    """The Data Package: ``files`` maps each file's release path to (bytes, sha256)."""
    title, url = LICENCES[release.licence]
    resources: list[dict[str, Any]] = []
    for spec in tables:
        path = f"tables/{spec.name}.csv"
        size, digest = files[path]
        resources.append({
            "name": spec.name.replace("_", "-"), "title": spec.title,
            "description": spec.description, "path": path, "type": "table",
            "profile": "tabular-data-resource",
            "format": "csv", "mediatype": "text/csv", "encoding": "utf-8",
            "bytes": size, "hash": f"sha256:{digest}", "schema": table_schema(spec)})
    listed = {r["path"] for r in resources}
    for path in sorted(set(files) - listed):
        size, digest = files[path]
        ext = path.rsplit(".", 1)[-1]
        resources.append({
            "name": _resource_name(path), "path": path, "type": "file",
            "format": ext, "mediatype": MEDIATYPES.get(ext, "application/octet-stream"),
            "bytes": size, "hash": f"sha256:{digest}"})
    return {
        # the Parquet twins and raw files are not tabular resources, so the package is a
        # plain data package whose CSV resources are tabular
        "profile": "data-package",
        "name": release.name,
        "title": f"MBB testbed measurements: {', '.join(release.campaigns)}",
        "description": f"Mobile-broadband measurements of campaign(s) "
                       f"{', '.join(release.campaigns)} over {release.period}. "
                       "See README.md.",
        "version": release.version,
        "schema_version": SCHEMA_VERSION,
        "licenses": [{"name": release.licence, "title": title, "path": url}],
        "contributors": [{"title": a, "role": "author"} for a in release.authors],
        "keywords": ["mobile broadband", "measurement", "TAT", "available bandwidth"],
        "resources": resources,
    }


def _resource_name(path: str) -> str:
    name = "".join(c if c.isalnum() or c in "-._" else "-" for c in path.lower())
    return name.replace("/", "-")


def descriptor_bytes(doc: Mapping[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def citation(release: Release) -> bytes:
    """CITATION.cff (Citation File Format 1.2.0) for the dataset."""
    doc = {
        "cff-version": "1.2.0",
        "message": "If you use this dataset, please cite it as below.",
        "type": "dataset",
        "title": f"MBB testbed measurements: {', '.join(release.campaigns)}",
        "version": release.version,
        "license": release.licence,
        "authors": [{"name": a} for a in release.authors],
        "keywords": ["mobile broadband", "measurement"],
    }
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def readme(release: Release, counts: Mapping[str, int], tables: Sequence[TableSpec]) -> bytes:
    """The datasheet: what was measured, how, with what, and what to watch for."""
    title, url = LICENCES[release.licence]
    out = [f"# {release.name} {release.version}", "",
           f"Mobile-broadband measurements from the MBB testbed: campaign(s) "
           f"{', '.join(release.campaigns)}, {release.period}. Schema version "
           f"{SCHEMA_VERSION}. Licence: {title} ({release.licence}, {url}).", "",
           "## What was measured", "",
           "Runs of the testbed's experiments on the nodes' modem interfaces (one SIM "
           "each): TAT (an iperf3 or D-ITG transfer, its receiver rate in 100 ms bins), "
           "available-bandwidth estimates (ABw tools) and ABw-TAT-ABw sessions pairing "
           "the two; the agent's modem, GPS and health samples over each run; and the "
           "TCP flows in the runs' header captures.", "",
           "## How", "",
           "Each run's bundle, as the node uploaded it to the orchestrator's archive, "
           "is converted by the same code that writes the testbed's time series (times "
           "moved from the node's clock to the orchestrator's, and to campaign time for "
           "compressed campaigns); the ABw-TAT pairs are those of the ABw vs TAT page.", "",
           "## Tables", "",
           "Each table is in `tables/` as CSV and as Parquet; `datapackage.json` gives "
           "every column's type and unit. Times are UTC (`time_utc`), with the node's "
           "time zone beside them (`timezone`).", "",
           "| table | rows | what |", "| --- | --- | --- |"]
    out += ["| " + " | ".join((t.name, str(counts.get(t.name, 0)),
                              t.description.replace("|", r"\|"))) + " |" for t in tables]
    out += ["", "## Privacy", "",
            "IP addresses in captures, flows and raw files are anonymised with "
            "Crypto-PAn (prefix-preserving) under a key made for this release and not "
            "published. Captures keep IP and transport headers only (no payload, no "
            "link layer). Positions are snapped to the centre of a "
            f"{release.grid_deg:g}-degree grid cell. Node ids are "
            + ("pseudonyms." if release.pseudonymised else "as in the testbed."), "",
            "## Tools and images", "",
            f"- testbed: {release.tool_version or 'unknown'}"]
    out += [f"- `{i}`" for i in release.images] or ["- images: none recorded"]
    out += ["", "## Link profiles of emulated nodes", ""]
    out += ([f"- {sim}: `{path}`" for sim, path in release.link_profiles]
            or ["None given: the nodes' links are real, or their profiles were not added."])
    out += ["", "## Excluded", ""]
    out += [f"- {e.kind} {e.target}: {e.reason}" for e in release.exclusions] or ["Nothing."]
    if release.excluded_runs:
        out += ["", f"{len(release.excluded_runs)} run(s) left out by these rules."]
    out += ["", "## Known caveats", ""]
    out += [f"- {c}" for c in release.caveats] or ["None known."]
    out += ["", "## Files", "",
            "`SHA256SUMS` covers every other file (`sha256sum -c SHA256SUMS`); "
            "`CHANGELOG.md` says what changed since the previous release; "
            "`CITATION.cff` says how to cite it. `testbed dataset verify DIR` checks all "
            "of it.", ""]
    return "\n".join(out).encode()


def checksums(files: Mapping[str, str]) -> bytes:
    """SHA256SUMS (``sha256sum`` format), sorted by path: path -> hex digest."""
    return "".join(f"{files[p]}  {p}\n" for p in sorted(files)).encode()


def parse_checksums(text: str) -> tuple[dict[str, str], list[str]]:
    """Path -> digest, and the lines that are not ``<64 hex>  <path>``."""
    out: dict[str, str] = {}
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        digest, sep, path = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            bad.append(f"{CHECKSUMS} line {n} is not '<sha256>  <path>': {line!r}")
            continue
        out[path.lstrip("*")] = digest
    return out, bad
