"""Loads the catalogue folder. Kept apart from parsing so parsing stays pure."""

from __future__ import annotations

from pathlib import Path

from orchestrator.catalogue.manifest import Manifest, ManifestError, parse_manifest

MANIFEST_FILE = "experiment.yaml"


def load_catalogue(root: Path) -> dict[str, Manifest]:
    """Every ``<root>/<name>/experiment.yaml``. A broken manifest stops start-up with a
    message naming the file, rather than silently hiding an experiment."""
    if not root.is_dir():
        raise ManifestError(f"experiment catalogue {root} is not a directory: set "
                            "TESTBED_EXPERIMENTS_DIR to the experiments folder")
    catalogue: dict[str, Manifest] = {}
    for path in sorted(root.glob(f"*/{MANIFEST_FILE}")):
        manifest = parse_manifest(path.read_text(encoding="utf-8"), source=str(path))
        if manifest.name != path.parent.name:
            raise ManifestError(
                f"{path}: name {manifest.name!r} differs from its folder {path.parent.name!r}"
            )
        catalogue[manifest.name] = manifest
    return catalogue
