"""Missing components: a named skip locally, a failure under CI=true (tests/conftest.py),
so a CI machine without Docker, root, influxd or PostgreSQL cannot pass by skipping."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import pytest_runtest_setup, require, require_tools


@pytest.mark.parametrize("value", ["true", "TRUE", "1", "yes"])
def test_under_ci_a_missing_component_fails_the_test(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match="influxd not installed .*CI=true"):
        require(False, "influxd not installed")


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_locally_a_missing_component_skips_with_its_reason(
        monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match="^influxd not installed$"):
        require(False, "influxd not installed")


def test_a_present_component_neither_skips_nor_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    require(True, "unused")
    require_tools("sh")


def test_missing_tools_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="needs no-such-tool-x, no-such-tool-y"):
        require_tools("sh", "no-such-tool-x", "no-such-tool-y")


class Item:
    def __init__(self, *marks: Any) -> None:
        self.marks = marks

    def iter_markers(self, name: str) -> Iterator[Any]:
        return (m for m in self.marks if m.name == name)


def test_the_requires_marker_goes_through_the_same_rule(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    ready = Item(pytest.mark.requires(None, None).mark)
    pytest_runtest_setup(ready)  # type: ignore[arg-type]
    missing = Item(pytest.mark.requires(None, "chromium not installed").mark)
    with pytest.raises(pytest.fail.Exception, match="chromium not installed"):
        pytest_runtest_setup(missing)  # type: ignore[arg-type]
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="chromium not installed"):
        pytest_runtest_setup(missing)  # type: ignore[arg-type]
