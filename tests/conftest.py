"""Shared fixtures. Warnings are errors (pyproject); every test builds its own settings,
database and registry, never global ones."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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
