"""The two Python images as built (scripts/build-images.sh): each holds what its program
imports, and the node image nothing of the orchestrator's. A real node fetches its image
over its own links; numpy, scipy and pyarrow were most of it when both images shared
one venv."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import require

TAG = "dev"
#: The orchestrator's and the dataset extra's heavy dependencies.
ORCHESTRATOR_ONLY = ("numpy", "scipy", "pyarrow", "sqlalchemy", "fastapi", "frictionless")


def _python(image: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "run", "--rm", "--entrypoint", "python", image, "-c", code],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def images() -> None:
    for image in (f"testbed/node:{TAG}", f"testbed/orchestrator:{TAG}"):
        found = subprocess.run(["docker", "image", "inspect", image], capture_output=True,
                               check=False).returncode == 0
        require(found, f"needs the image {image} (scripts/build-images.sh)")


def test_node_image_runs_the_agent_without_the_orchestrators_dependencies(images: None) -> None:
    probe = _python(f"testbed/node:{TAG}",
                    "import importlib.util as u, node_agent.main, docker, httpx, yaml\n"
                    f"print(','.join(m for m in {ORCHESTRATOR_ONLY!r} if u.find_spec(m)))")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "", f"the node image carries {probe.stdout.strip()}"


def test_orchestrator_image_imports_its_app_and_the_dataset_extra(images: None) -> None:
    probe = _python(f"testbed/orchestrator:{TAG}",
                    "import orchestrator.cli.main, scipy.stats, pyarrow.parquet, frictionless,"
                    " yacryptopan, psycopg; print('ok')")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "ok"
