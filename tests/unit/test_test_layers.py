"""Unit tests stand alone: they import nothing from the integration layer (whose modules
start servers, containers and namespaces in their fixtures), its stand-ins included.
Stand-ins that several layers share live beside tests/conftest.py (tests/engines.py)."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).parent
OTHER_LAYERS = ("tests.integration",)


def _imported(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


def test_no_unit_test_imports_the_integration_layer() -> None:
    offenders = {
        str(path.relative_to(UNIT)): name
        for path in sorted(UNIT.rglob("*.py"))
        for name in _imported(path)
        if name.startswith(OTHER_LAYERS)
    }
    assert offenders == {}, (
        f"unit tests import from the integration layer: {offenders}; move the shared "
        "stand-in beside tests/conftest.py")
