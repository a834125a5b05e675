"""scripts/up in a new checkout beside a database volume that another checkout made: it
stops before starting anything and says what to do, instead of starting an orchestrator
that the database refuses (its volume keeps the password it was made with)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, require_docker

pytestmark = pytest.mark.docker


@pytest.fixture
def project() -> Iterator[str]:
    """A compose project name of its own, with a PostgreSQL volume already made."""
    require_docker("scripts/up's volume check")
    name = f"upvol{uuid.uuid4().hex[:10]}"
    subprocess.run(["docker", "volume", "create", f"{name}_postgres-data"],
                   check=True, capture_output=True)
    yield name
    subprocess.run(["docker", "volume", "rm", "-f", f"{name}_postgres-data"],
                   capture_output=True)


def test_a_new_checkout_beside_an_old_database_volume_stops_with_what_to_do(
        project: str, tmp_path: Path) -> None:
    checkout = tmp_path / "testbed"
    shutil.copytree(REPO / "scripts", checkout / "scripts")  # no deploy/.secrets: new
    env = {**os.environ, "TESTBED_COMPOSE_PROJECT": project}
    done = subprocess.run([str(checkout / "scripts/up"), "--no-demo"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"the volume {project}_postgres-data holds a database made with a password that" \
        in done.stderr, done.stderr
    assert "scripts/down --volumes" in done.stderr
    # nothing was built or started for it
    assert not (checkout / "build").exists()
    running = subprocess.run(["docker", "ps", "-aq", "--filter", f"name={project}"],
                             capture_output=True, text=True).stdout
    assert running.strip() == ""
