"""Loads the catalogue folder. Kept apart from parsing so parsing stays pure."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from orchestrator.catalogue.manifest import Manifest, ManifestError, parse_manifest

MANIFEST_FILE = "experiment.yaml"


def load_catalogue(root: Path) -> dict[str, Manifest]:
    """Every ``<root>/<name>/experiment.yaml``. A broken manifest stops start-up with a
    message naming the file, rather than silently hiding an experiment."""
    if not root.is_dir():
        raise ManifestError(f"experiment catalogue {root} is not a directory")
    catalogue: dict[str, Manifest] = {}
    for path in sorted(root.glob(f"*/{MANIFEST_FILE}")):
        manifest = parse_manifest(path.read_text(encoding="utf-8"), source=str(path))
        if manifest.name != path.parent.name:
            raise ManifestError(
                f"{path}: name {manifest.name!r} differs from its folder {path.parent.name!r}"
            )
        catalogue[manifest.name] = manifest
    return catalogue


#: The experiments folder when none is configured (settings' default, relative to the
#: working directory, as the orchestrator is started from a checkout or its image).
DEFAULT_ROOT = Path("experiments")


@cache
def default_catalogue() -> dict[str, Manifest]:
    """The catalogue of the default experiments folder (loaded once), for callers that
    hold no service context; empty when there is no such folder."""
    return load_catalogue(DEFAULT_ROOT) if DEFAULT_ROOT.is_dir() else {}
