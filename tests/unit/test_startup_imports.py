"""What a process imports before it serves is time on every start: each orchestrator
replica's and each node agent's, on the warm start's path to the first result
(bench/RESULTS.md). Heavy libraries that only some requests need are imported where
they are used; this keeps them out of the start."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: The libraries only some requests or background passes need, by what is started.
NOT_AT_START = {
    # scipy: the cca page's significance test and the ABw proxy's fit; pyarrow: the
    # dataset releases.
    # alembic: migrating a database at an older revision (orchestrator.store.migrate).
    "orchestrator.api.app": ["scipy", "pyarrow", "alembic"],
}


def _imported_after(module: str, names: list[str]) -> list[str]:
    """The ``names`` a fresh interpreter has imported once it imported ``module``."""
    code = (f"import json, sys; import {module}; "
            f"print(json.dumps([n for n in {names!r} if n in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    found: list[str] = json.loads(out)
    return found


@pytest.mark.parametrize("module", sorted(NOT_AT_START))
def test_a_start_does_not_import_what_only_some_requests_need(module: str) -> None:
    assert _imported_after(module, NOT_AT_START[module]) == []
