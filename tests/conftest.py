"""Shared fixtures. Warnings are errors (pyproject); every test builds its own settings,
database and registry, never global ones.

Missing components (Docker, root for network namespaces, nft, tcpdump, iperf3, influxd,
chromium, PostgreSQL): every test that needs one says so through :func:`require` (or
the ``requires`` marker). Locally that skips, named with its reason (``-ra``); under
``CI=true`` it fails, so a CI machine that lacks a component cannot pass by skipping.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

REPO = Path(__file__).resolve().parent.parent


@cache
def experiments() -> dict[str, Any]:
    """The repository's experiment catalogue, as the orchestrator loads it (nothing of
    the core reads it from the working directory: callers pass it)."""
    from orchestrator.catalogue.loader import load_catalogue
    return load_catalogue(REPO / "experiments")


def load_server_module(name: str) -> ModuleType:
    """A module of server-image/, an image's source folder rather than a package,
    loaded by path (and registered: dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "server-image" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def stage_copies(dockerfile: Path, root: Path, *, under: str = "/") -> list[str]:
    """Stage the repository files that ``dockerfile`` COPYs to paths under ``under``
    into ``root`` (a source folder's contents, as Docker copies a directory), so a test
    can run an image's code with exactly what the image gets. Staged build outputs
    (``build/``) are left out. Returns the sources staged."""
    staged: list[str] = []
    for line in dockerfile.read_text().replace("\\\n", " ").splitlines():
        if not line.startswith("COPY "):
            continue
        *sources, dest = shlex.split(line)[1:]
        if not dest.startswith(under):
            continue
        for source in sources:
            if source.startswith("build/"):
                continue
            target = root / dest.lstrip("/")
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(REPO / source, target / Path(source).name)
            staged.append(source)
    return staged


def in_ci() -> bool:
    """CI=true (or 1, yes), as CI services and .ci/run set it."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def unavailable(why: str) -> NoReturn:
    """Skip the calling test here, or fail it under CI=true (a component missing on
    the CI machine is a broken CI, not a pass)."""
    if in_ci():
        pytest.fail(f"{why} (CI=true: a missing component fails the run; scripts/test "
                    "installs what the tests need)", pytrace=False)
    pytest.skip(why)


def require(condition: bool, why: str) -> None:
    """Go on if ``condition`` holds; else :func:`unavailable`."""
    if not condition:
        unavailable(why)


def require_root(what: str) -> None:
    require(os.geteuid() == 0, f"needs root for {what}")


def require_docker(what: str) -> None:
    """Go on if a Docker engine answers (``docker info``); else :func:`unavailable`."""
    ok = shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True).returncode == 0
    require(ok, f"{what}: no running Docker engine (docker info failed)")


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    require(not missing, f"needs {', '.join(missing)} on PATH (scripts/test installs them)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.requires(problem, ...)``: each argument is why the test cannot
    run here, or None when it can (e.g. ``influxd.available()``); see :func:`require`."""
    for mark in item.iter_markers("requires"):
        for problem in mark.args:
            if problem is not None:
                unavailable(str(problem))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``long`` (most of an hour of the fleet's time) run only when asked
    for with TESTBED_LONG=1; otherwise they are deselected, so scripts/test and CI,
    which select by other markers, never start one."""
    if os.environ.get("TESTBED_LONG") == "1":
        return
    long = [item for item in items if item.get_closest_marker("long") is not None]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if item.get_closest_marker("long") is None]


def story(run: dict[str, Any]) -> str:
    """A run's transitions one per line, final reason first: what a failed assertion
    should show (the raw event list is cut short in test reports)."""
    lines = [f"{run['id']} ended {run['state']}: {run.get('reason')}"]
    lines += [f"  {e['at']} {e['state']} ({e['source']}): {e['reason']}"
              for e in run["events"]]
    return "\n".join(lines)


class ManualClock:
    """A clock tests move by hand; the orchestrator takes any ``Clock``."""

    def __init__(self, start: datetime | None = None) -> None:
        self.t = start or datetime(2026, 11, 22, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def repo() -> Iterator[Path]:
    yield REPO
