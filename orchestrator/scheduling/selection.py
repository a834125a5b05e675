"""Node selection by tag expressions, e.g.
``country:SE AND (operator:240-01 OR operator:Telia) AND NOT mobility:mobile``.

An expression is evaluated per SIM (node + interface), not per node: ``operator:`` and
``interface:`` are facts of a SIM, the other keys facts of its node. A node is selected
when at least one of its SIMs matches, and only the matching SIMs are measured, so
``country:SE AND NOT operator:Telia`` measures every Swedish SIM except Telia's.

Grammar (keywords case-insensitive; values compared case-insensitively, ``*`` and ``?``
are wildcards, ``a,b`` means either; quote values with spaces: ``operator:"Tele2 SE"``)::

    expr := and ("OR" and)*        and := not ("AND" not)*
    not  := "NOT" not | atom       atom := "(" expr ")" | key ":" value

A hand-written recursive-descent parser (a campaign spec is data, never code); errors
name the position and show it with a caret. Every planning pass evaluates the
expression once per SIM of the fleet, so its size is bounded: at most
:data:`MAX_CHARS` characters, :data:`MAX_TERMS` values and :data:`MAX_DEPTH` levels of
parentheses and NOTs; lexing and parsing are linear in the length.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from orchestrator.errors import Invalid
from orchestrator.model.ids import NodeId


@dataclass(frozen=True)
class SimFacts:
    interface: str
    mcc_mnc: str
    operator_name: str


@dataclass(frozen=True)
class NodeFacts:
    """What selection (and the planner) know of a node: static facts, no health."""

    id: NodeId
    country: str
    timezone: str = "UTC"
    model: str = "unknown"
    architecture: str = "unknown"
    mobility: str = "stationary"
    projects: frozenset[str] = frozenset()
    tags: frozenset[str] = frozenset()
    sims: tuple[SimFacts, ...] = ()


Matcher = Callable[[NodeFacts, SimFacts], bool]

#: key -> the strings a value is compared against. ``arch`` is short for architecture.
_FIELDS: dict[str, Callable[[NodeFacts, SimFacts], Iterable[str]]] = {
    "country": lambda n, s: (n.country,),
    "operator": lambda n, s: (s.mcc_mnc, s.operator_name),
    "model": lambda n, s: (n.model,),
    "architecture": lambda n, s: (n.architecture,),
    "arch": lambda n, s: (n.architecture,),
    "mobility": lambda n, s: (n.mobility,),
    "project": lambda n, s: n.projects,
    "tag": lambda n, s: n.tags,
    "node": lambda n, s: (n.id,),
    "interface": lambda n, s: (s.interface,),
}
KEYS = tuple(sorted(_FIELDS))

#: Longest expression, characters: a few lines of terms. A fleet is selected by a few
#: keys and wildcards, not by listing thousands of values (that is what tags are for).
MAX_CHARS = 4096
#: Most values in one expression (each comma-separated value of a term counts): the
#: per-SIM evaluation cost of every planning pass.
MAX_TERMS = 256
#: Deepest nesting of parentheses and NOTs (the parser recurses per level).
MAX_DEPTH = 32
#: Characters of a long expression shown around an error's position.
_CONTEXT = 40
_TRAILING = re.compile(r"\s*\Z")

_TOKEN = re.compile(
    r"""\s*(?:(?P<lp>\()|(?P<rp>\))|(?P<term>(?P<key>[A-Za-z_]+)\s*:\s*
    (?P<value>"[^"]*"|[^\s()"]+)?)|(?P<word>[^\s()]+))""",
    re.VERBOSE,
)


class SelectionError(Invalid):
    """A selection expression that cannot be parsed; ``position`` is 0-based."""

    def __init__(self, source: str, position: int, problem: str) -> None:
        self.source = source
        self.position = position
        start = max(0, position - _CONTEXT)
        excerpt = source[start:position + _CONTEXT]
        shown = source if len(source) <= 2 * _CONTEXT else f"{source[:2 * _CONTEXT]}..."
        super().__init__(
            f"selection {shown!r}: {problem} at position {position}\n"
            f"  {excerpt}\n  {' ' * (position - start)}^"
        )


@dataclass(frozen=True)
class _Tok:
    kind: str  # "(", ")", "AND", "OR", "NOT", "term", "end"
    pos: int
    key: str = ""
    values: tuple[str, ...] = ()


def _lex(source: str) -> list[_Tok]:
    """Tokens of ``source``, in one left-to-right pass (no slicing of the rest)."""
    toks: list[_Tok] = []
    pos = 0
    while pos < len(source):
        if _TRAILING.match(source, pos):
            break
        m = _TOKEN.match(source, pos)
        if m is None:  # only an unterminated quote gets here
            raise SelectionError(source, source.index('"', pos), "unterminated quote")
        start = m.start(m.lastgroup or 0)
        if m.group("lp"):
            toks.append(_Tok("(", start))
        elif m.group("rp"):
            toks.append(_Tok(")", start))
        elif m.group("term"):
            key = m.group("key").lower()
            if key not in _FIELDS:
                raise SelectionError(
                    source, start, f"unknown key {key!r} (keys: {', '.join(KEYS)})"
                )
            raw = m.group("value")
            if raw is None and source.startswith('"', m.end()):
                raise SelectionError(source, m.end(), "unterminated quote")
            if raw is None or raw in ('""', ""):
                raise SelectionError(source, m.end(), f"{key}: needs a value")
            text = raw[1:-1] if raw.startswith('"') else raw
            values = tuple(v.strip().casefold() for v in text.split(",") if v.strip())
            if not values:
                raise SelectionError(source, m.start("value"), f"{key}: needs a value")
            toks.append(_Tok("term", start, key, values))
        else:
            word = m.group("word")
            if word.upper() in ("AND", "OR", "NOT"):
                toks.append(_Tok(word.upper(), start))
            elif word.startswith('"'):
                raise SelectionError(source, start, "unterminated quote")
            else:
                raise SelectionError(
                    source, start, f"expected key:value, AND, OR, NOT or a parenthesis, "
                    f"not {word!r}"
                )
        pos = m.end()
    toks.append(_Tok("end", len(source)))
    return toks


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        if len(source) > MAX_CHARS:
            raise SelectionError(source, MAX_CHARS, f"the expression is {len(source)} "
                                 f"characters long; at most {MAX_CHARS}: select by fewer, "
                                 "broader terms (wildcards *, value lists a,b, or tag:)")
        self.toks = _lex(source)
        values = 0
        for tok in self.toks:
            values += len(tok.values)
            if values > MAX_TERMS:
                raise SelectionError(source, tok.pos, f"more than {MAX_TERMS} values; select "
                                     "by fewer, broader terms (wildcards *, or tag:)")
        self.i = 0
        self.depth = 0

    def nested(self, tok: _Tok) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(tok, f"nested deeper than {MAX_DEPTH} parentheses or NOTs")

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def fail(self, tok: _Tok, problem: str) -> SelectionError:
        return SelectionError(self.source, tok.pos, problem)

    def parse(self) -> Matcher:
        if self.peek().kind == "end":
            raise self.fail(self.peek(), "empty expression")
        m = self.expr()
        tok = self.peek()
        if tok.kind == ")":
            raise self.fail(tok, "unmatched ')'")
        if tok.kind != "end":
            raise self.fail(tok, "expected AND or OR between terms")
        return m

    def expr(self) -> Matcher:
        parts = [self.conj()]
        while self.peek().kind == "OR":
            self.take()
            parts.append(self.conj())
        return parts[0] if len(parts) == 1 else _any(parts)

    def conj(self) -> Matcher:
        parts = [self.neg()]
        while self.peek().kind == "AND":
            self.take()
            parts.append(self.neg())
        return parts[0] if len(parts) == 1 else _all(parts)

    def neg(self) -> Matcher:
        if self.peek().kind == "NOT":
            self.nested(self.take())
            inner = self.neg()
            self.depth -= 1
            return lambda n, s: not inner(n, s)
        return self.atom()

    def atom(self) -> Matcher:
        tok = self.take()
        if tok.kind == "(":
            self.nested(tok)
            inner = self.expr()
            self.depth -= 1
            close = self.take()
            if close.kind != ")":
                raise self.fail(close, f"expected ')' to close the '(' at position {tok.pos}")
            return inner
        if tok.kind == "term":
            return _term(tok.key, tok.values)
        what = "end of expression" if tok.kind == "end" else repr(tok.kind)
        raise self.fail(tok, f"expected key:value, NOT or '(', found {what}")


def _any(parts: Sequence[Matcher]) -> Matcher:
    return lambda n, s: any(p(n, s) for p in parts)


def _all(parts: Sequence[Matcher]) -> Matcher:
    return lambda n, s: all(p(n, s) for p in parts)


def _term(key: str, values: tuple[str, ...]) -> Matcher:
    field = _FIELDS[key]
    if not any(ch in v for v in values for ch in "*?["):
        wanted = frozenset(values)
        return lambda n, s: any(f.casefold() in wanted for f in field(n, s))
    return lambda n, s: any(
        fnmatchcase(f.casefold(), v) for f in field(n, s) for v in values
    )


@dataclass(frozen=True)
class Selection:
    """A parsed expression. ``Selection.parse("")`` is refused; use :data:`EVERYTHING`."""

    source: str
    matcher: Matcher

    @classmethod
    def parse(cls, source: str) -> Selection:
        return cls(source, _Parser(source).parse())

    def matches(self, node: NodeFacts, sim: SimFacts) -> bool:
        return self.matcher(node, sim)

    def sims_of(self, node: NodeFacts) -> tuple[SimFacts, ...]:
        """The node's SIMs the expression selects (empty: the node is not selected)."""
        return tuple(s for s in node.sims if self.matcher(node, s))

    def select(self, nodes: Iterable[NodeFacts]) -> list[tuple[NodeFacts, tuple[SimFacts, ...]]]:
        chosen = []
        for node in nodes:
            sims = self.sims_of(node)
            if sims:
                chosen.append((node, sims))
        return chosen


EVERYTHING = Selection("(every SIM)", lambda n, s: True)


def node_list(ids: Iterable[str]) -> Selection:
    """An explicit node list as a selection."""
    wanted = frozenset(ids)
    return Selection(f"node:{','.join(sorted(wanted))}", lambda n, s: n.id in wanted)
