"""Each experiment image gets the kit and its own folder, and nothing else of the
project (docs/experiment-contract.md): what its Dockerfile copies, staged alone and run
by an interpreter without site-packages (as Debian's python3 in the image), gets as far
as reading the run configuration, so every module it imports is there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, stage_copies

EXPERIMENTS = sorted(p.parent.name for p in REPO.glob("experiments/*/Dockerfile"))


def entrypoint(dockerfile: Path) -> list[str]:
    lines = [line for line in dockerfile.read_text().splitlines()
             if line.startswith("ENTRYPOINT ")]
    assert len(lines) == 1, f"{dockerfile}: one ENTRYPOINT (exec form), not {lines}"
    command: list[str] = json.loads(lines[0].removeprefix("ENTRYPOINT "))
    return command


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_an_experiment_image_holds_the_kit_and_its_folder_only(
    name: str, tmp_path: Path
) -> None:
    dockerfile = REPO / "experiments" / name / "Dockerfile"
    sources = stage_copies(dockerfile, tmp_path)
    assert "common/testbed_kit/" in sources
    assert all(s.startswith(("common/testbed_kit/", f"experiments/{name}/"))
               for s in sources), sources
    assert "build/wheels" not in dockerfile.read_text()  # not the project's wheel
    python, script = entrypoint(dockerfile)
    assert python == "python3", "the image's own interpreter: it has no venv"
    # -S: no site-packages (the checkout's editable install); -E: no PYTHONPATH.
    proc = subprocess.run(
        [sys.executable, "-S", "-E", str(tmp_path / script.lstrip("/"))],
        env={"TESTBED_CONFIG": str(tmp_path / "absent.json"),
             "TESTBED_RESULTS": str(tmp_path / "results")},
        capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"{name} failed: no measurement server given (config server_address / TESTBED_SERVER)")
