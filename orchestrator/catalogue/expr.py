"""Safe arithmetic expressions for manifest forecasts.

A manifest states its slot length and data volume as expressions over its parameters
and ``rate_bps`` (the link's expected rate), e.g. ``rate_bps / 8 * duration_s * 1.2``.
They are parsed once into a checked AST that admits only numbers, names, arithmetic,
comparisons, conditionals and a few functions: a manifest is data, never code.

Each is evaluated for every lane of every planning pass, so its size is bounded
(:data:`MAX_CHARS`, :data:`MAX_NODES`) before and after parsing, and powers are taken
in floating point (an integer ``10 ** 10 ** 9`` would compute for minutes; a float one
overflows at once and is refused).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "ceil": math.ceil,
    "floor": math.floor,
    "abs": abs,
}
#: Longest expression, characters, and most syntax-tree nodes: a forecast is one line.
MAX_CHARS = 1000
MAX_NODES = 500

_BINOPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: float(a) ** float(b),
    ast.Mod: lambda a, b: a % b,
}
_CMPOPS: dict[type[ast.cmpop], Callable[[object, object], bool]] = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,  # type: ignore[operator]
    ast.LtE: lambda a, b: a <= b,  # type: ignore[operator]
    ast.Gt: lambda a, b: a > b,  # type: ignore[operator]
    ast.GtE: lambda a, b: a >= b,  # type: ignore[operator]
}


class ExpressionError(ValueError):
    pass


@dataclass(frozen=True)
class Expression:
    source: str
    tree: ast.Expression
    names: frozenset[str]

    def evaluate(self, variables: Mapping[str, object]) -> float:
        missing = self.names - variables.keys()
        if missing:
            raise ExpressionError(
                f"expression {self.source!r} needs {sorted(missing)}, which are not defined"
            )
        try:
            value = _eval(self.tree.body, variables)
        except (ArithmeticError, TypeError, RecursionError) as e:
            raise ExpressionError(f"expression {self.source!r} failed: {e}") from e
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ExpressionError(f"expression {self.source!r} gave {value!r}, not a number")
        return float(value)


def parse_expression(source: str | float | int) -> Expression:
    """Parse and check ``source``; raise :class:`ExpressionError` naming what is refused."""
    text = str(source)
    if len(text) > MAX_CHARS:
        raise ExpressionError(f"expression {text[:60]!r}... is {len(text)} characters long; "
                              f"at most {MAX_CHARS}")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as e:
        raise ExpressionError(f"expression {text!r} is not valid: {e.msg}") from e
    except (RecursionError, MemoryError) as e:  # nesting too deep for the parser
        raise ExpressionError(f"expression {text!r} is nested too deeply") from e
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise ExpressionError(f"expression {text!r} has {len(nodes)} elements; at most "
                              f"{MAX_NODES}")
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Name):
            if node.id not in _FUNCTIONS:
                names.add(node.id)
        elif isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS):
                raise ExpressionError(
                    f"expression {text!r}: only {sorted(_FUNCTIONS)} may be called"
                )
            if node.keywords:
                raise ExpressionError(f"expression {text!r}: keyword arguments not allowed")
        elif not isinstance(
            node,
            ast.Expression
            | ast.Constant
            | ast.BinOp
            | ast.UnaryOp
            | ast.Compare
            | ast.IfExp
            | ast.Load
            | ast.operator
            | ast.unaryop
            | ast.cmpop
            | ast.BoolOp
            | ast.boolop,
        ):
            raise ExpressionError(f"expression {text!r}: {type(node).__name__} is not allowed")
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float | str):
            raise ExpressionError(f"expression {text!r}: constant {node.value!r} not allowed")
    return Expression(text, tree, frozenset(names))


def _eval(node: ast.expr, env: Mapping[str, object]) -> object:
    match node:
        case ast.Constant(value=v):
            return v
        case ast.Name(id=name):
            return env[name]
        case ast.BinOp(left=l, op=op, right=r):
            return _BINOPS[type(op)](_num(_eval(l, env)), _num(_eval(r, env)))
        case ast.UnaryOp(op=ast.USub(), operand=o):
            return -_num(_eval(o, env))
        case ast.UnaryOp(op=ast.UAdd(), operand=o):
            return _num(_eval(o, env))
        case ast.UnaryOp(op=ast.Not(), operand=o):
            return not _eval(o, env)
        case ast.Compare(left=l, ops=ops, comparators=rest):
            left = _eval(l, env)
            for cmp, right_node in zip(ops, rest, strict=True):
                right = _eval(right_node, env)
                if not _CMPOPS[type(cmp)](left, right):
                    return False
                left = right
            return True
        case ast.BoolOp(op=ast.And(), values=values):
            return all(_eval(v, env) for v in values)
        case ast.BoolOp(op=ast.Or(), values=values):
            return any(_eval(v, env) for v in values)
        case ast.IfExp(test=t, body=b, orelse=o):
            return _eval(b, env) if _eval(t, env) else _eval(o, env)
        case ast.Call(func=ast.Name(id=fname), args=args):
            return _FUNCTIONS[fname](*(_num(_eval(a, env)) for a in args))
    raise ExpressionError(f"unsupported expression element {ast.dump(node)}")


def _num(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{value!r} is not a number")
    return value
