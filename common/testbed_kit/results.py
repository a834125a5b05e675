"""The run's results: raw tool outputs, and the versioned result file that names them.

Every run is a reproducible record: what the tools printed is kept byte for byte
beside the result an experiment derives from it, so a parser fixed later can be re-run
on the archive. The main result file carries ``format`` and ``version`` at its top
level (docs/experiment-contract.md); :func:`write_result` refuses one without them, and
writes it whole or not at all, so a run killed at its deadline never leaves half a
JSON document for ingest to choke on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _target(directory: Path, name: str) -> Path:
    if not name or Path(name).name != name:
        raise ValueError(f"a result file's name is a plain file name, not {name!r}")
    return directory / name


def write_raw(directory: Path, name: str, content: str | bytes | Mapping[str, Any]
              | list[Any]) -> Path:
    """Keep a tool's output as ``directory/name``: text and bytes as they are, a
    decoded JSON report (a mapping or a list) as JSON."""
    path = _target(directory, name)
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content, indent=1))
    return path


def write_result(directory: Path, name: str, doc: Mapping[str, Any]) -> Path:
    """Write the versioned result ``doc`` as ``directory/name`` (JSON), atomically.
    ``doc`` must carry ``format`` (a name such as ``testbed.tat``) and ``version`` (a
    positive integer, raised when a reader would misread the new layout)."""
    fmt, version = doc.get("format"), doc.get("version")
    if not isinstance(fmt, str) or not fmt:
        raise ValueError(f"a result needs its format's name in 'format', not {fmt!r}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"result {fmt}: 'version' must be a positive integer, not {version!r}")
    path = _target(directory, name)
    partial = path.with_name(f".{name}.partial")
    partial.write_text(json.dumps({"format": fmt, "version": version, **doc}, indent=1))
    os.replace(partial, path)
    return path
