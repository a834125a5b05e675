"""Forecast expressions: arithmetic works, code does not."""

from __future__ import annotations

import pytest

from orchestrator.catalogue.expr import ExpressionError, parse_expression


def test_arithmetic_over_parameters() -> None:
    e = parse_expression("rate_bps / 8 * duration_s * 1.2 + 2e6")
    assert e.names == {"rate_bps", "duration_s"}
    assert e.evaluate({"rate_bps": 8e6, "duration_s": 10}) == pytest.approx(14e6)


def test_functions_and_conditionals() -> None:
    e = parse_expression("max(10, duration_s) if direction == 'uplink' else 0")
    assert e.evaluate({"duration_s": 3, "direction": "uplink"}) == 10
    assert e.evaluate({"duration_s": 3, "direction": "downlink"}) == 0


@pytest.mark.parametrize("source", [
    "__import__('os').system('id')",
    "open('/etc/passwd')",
    "().__class__",
    "[x for x in range(9)]",
    "lambda: 1",
])
def test_code_is_refused(source: str) -> None:
    with pytest.raises(ExpressionError):
        parse_expression(source)


def test_missing_variable_is_named() -> None:
    with pytest.raises(ExpressionError, match="duration_s"):
        parse_expression("duration_s * 2").evaluate({})
