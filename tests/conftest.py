"""Shared fixtures. Warnings are errors (pyproject); every test builds its own settings,
database and registry, never global ones."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent


def load_server_module(name: str) -> ModuleType:
    """A module of server-image/, an image's source folder rather than a package,
    loaded by path (and registered: dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "server-image" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


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
