"""``scripts/down`` against what a stopped stack can leave on a real Docker engine.

A CI run failed when ``compose down`` met a network that still had an endpoint (Docker
answers "has active endpoints"; a killed or reconnected container can leave a stale
one), and every later ``down`` failed the same way. Here each leftover is made on
purpose, in a throwaway compose project of its own (``TESTBED_COMPOSE_PROJECT``), from
a copy of the scripts, so a stack running beside the test is not touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, require, require_docker

IMAGE = "debian:bookworm-slim"  # the base image scripts/build-images.sh makes


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def exists(kind: str, name: str) -> bool:
    return docker(kind, "inspect", name, check=False).returncode == 0


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A project name and a copy of the repository's scripts and compose file (down
    --volumes deletes the copy's deploy/.secrets, not the checkout's)."""
    require_docker("scripts/down's tests")
    require(exists("image", IMAGE), f"needs the image {IMAGE} (scripts/build-images.sh)")
    name = f"tbdown{uuid.uuid4().hex[:8]}"
    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    shutil.copy(REPO / "docker-compose.yml", tmp_path)
    (tmp_path / "deploy").mkdir()
    yield name, tmp_path
    for c in docker("ps", "-aq", "--filter", f"name={name}").stdout.split():
        docker("rm", "-f", c, check=False)
    for n in docker("network", "ls", "-q", "--filter", f"name={name}").stdout.split():
        docker("network", "rm", n, check=False)
    for v in docker("volume", "ls", "-q", "--filter", f"name={name}").stdout.split():
        docker("volume", "rm", v, check=False)


def down(project: tuple[str, Path]) -> subprocess.CompletedProcess[str]:
    name, root = project
    return subprocess.run([str(root / "scripts" / "down"), "--volumes"], capture_output=True,
                          text=True, env={**os.environ, "TESTBED_COMPOSE_PROJECT": name},
                          timeout=120)


def sleeper(name: str, *args: str) -> None:
    docker("run", "-d", "--name", name, *args, "--entrypoint", "sleep", IMAGE, "300")


def test_a_network_with_a_foreign_endpoint_is_cleared_and_removed(
        project: tuple[str, Path]) -> None:
    name, _ = project
    network = f"{name}_control"
    docker("network", "create", "--label", f"com.docker.compose.project={name}",
           "--label", "com.docker.compose.network=control", network)
    sleeper(f"{name}-intruder", "--network", network)
    done = down(project)
    assert done.returncode == 0, done.stderr
    assert "has active endpoints" in done.stderr  # the first try met it
    assert f"disconnecting {name}-intruder" in done.stderr
    assert not exists("network", network)


def test_only_the_projects_experiment_containers_are_removed(
        project: tuple[str, Path]) -> None:
    name, _ = project
    # A node container of the project with a run in its network namespace, and another
    # stack's run beside them.
    node = f"{name}-node"
    sleeper(node, "--label", f"com.docker.compose.project={name}",
            "--label", "com.docker.compose.service=node-gone")
    sleeper(f"{name}-run", "--label", "testbed.run=r1", "--network", f"container:{node}")
    sleeper(f"{name}-other-run", "--label", "testbed.run=r2")
    # A run whose node container is already gone: found by the project label the agent
    # gives it (another project's label is not this project's).
    sleeper(f"{name}-orphan-run", "--label", "testbed.run=r3",
            "--label", f"testbed.project={name}")
    sleeper(f"{name}-other-orphan", "--label", "testbed.run=r4",
            "--label", f"testbed.project={name}x")
    # Runs' bounded volumes (results, /tmp, config), labelled as their containers.
    docker("volume", "create", "--label", "testbed.run=r3", "--label",
           f"testbed.project={name}", f"{name}-orphan-run-results")
    docker("volume", "create", "--label", "testbed.run=r4", "--label",
           f"testbed.project={name}x", f"{name}-other-orphan-results")
    done = down(project)
    assert done.returncode == 0, done.stderr
    assert not exists("container", f"{name}-run")
    assert not exists("container", f"{name}-orphan-run")
    assert not exists("volume", f"{name}-orphan-run-results")
    assert exists("volume", f"{name}-other-orphan-results")
    assert exists("container", f"{name}-other-run")
    assert exists("container", f"{name}-other-orphan")


def test_a_volume_held_from_outside_fails_with_its_holder_named(
        project: tuple[str, Path]) -> None:
    name, root = project
    volume = f"{name}_postgres-data"
    docker("volume", "create", "--label", f"com.docker.compose.project={name}", volume)
    sleeper(f"{name}-holder", "-v", f"{volume}:/data")
    done = down(project)
    assert done.returncode == 1
    assert f"left: volume {volume}, used by: {name}-holder" in done.stderr
    assert "compose down failed twice" in done.stderr
    assert exists("volume", volume)  # the holder's data is not taken from it
    assert (root / "deploy" / ".secrets" / "compose.env").exists()  # nothing half-done
