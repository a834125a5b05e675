"""Selection expressions: examples, every kind of bad input with its position, and a
property test against a reference evaluator over random expression trees."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.model.ids import NodeId
from orchestrator.scheduling.selection import (
    NodeFacts,
    Selection,
    SelectionError,
    SimFacts,
    node_list,
)

TELIA = SimFacts("op0", "240-01", "Telia")
TRE = SimFacts("op1", "240-02", "Tre")
TELENOR = SimFacts("op0", "242-01", "Telenor NO")
SE1 = NodeFacts(NodeId("se-01"), "SE", model="apu2", architecture="amd64",
                tags=frozenset({"roof"}), projects=frozenset({"mbb"}), sims=(TELIA, TRE))
SE2 = NodeFacts(NodeId("se-02"), "SE", mobility="mobile", architecture="arm64",
                sims=(TELIA,))
NO1 = NodeFacts(NodeId("no-01"), "NO", sims=(TELENOR,))
FLEET = [SE1, SE2, NO1]


def chosen(expr: str) -> dict[str, list[str]]:
    return {n.id: [s.interface for s in sims] for n, sims in Selection.parse(expr).select(FLEET)}


def test_the_documented_example() -> None:
    expr = "country:SE AND (operator:240-01 OR operator:Telia) AND NOT mobility:mobile"
    assert chosen(expr) == {"se-01": ["op0"]}


def test_evaluated_per_sim_so_not_operator_keeps_the_other_sims() -> None:
    assert chosen("country:SE AND NOT operator:telia") == {"se-01": ["op1"]}


@pytest.mark.parametrize(("expr", "expected"), [
    ("operator:Tre", {"se-01": ["op1"]}),
    ('operator:"telenor no"', {"no-01": ["op0"]}),
    ("node:se-*", {"se-01": ["op0", "op1"], "se-02": ["op0"]}),
    ("node:se-02,no-01", {"se-02": ["op0"], "no-01": ["op0"]}),
    ("arch:arm64 or tag:roof", {"se-01": ["op0", "op1"], "se-02": ["op0"]}),
    ("project:mbb and model:APU2", {"se-01": ["op0", "op1"]}),
    ("NOT NOT country:no", {"no-01": ["op0"]}),
    ("interface:op1", {"se-01": ["op1"]}),
    ("country:FI", {}),
])
def test_examples(expr: str, expected: dict[str, list[str]]) -> None:
    assert chosen(expr) == expected


def test_explicit_node_list() -> None:
    assert [n.id for n, _ in node_list(["no-01"]).select(FLEET)] == ["no-01"]


@pytest.mark.parametrize(("expr", "position", "says"), [
    ("", 0, "empty expression"),
    ("country:SE AND (", 16, "found end of expression"),
    ("country:SE AND (operator:Telia", 30, "expected ')' to close the '(' at position 15"),
    ("country:SE)", 10, "unmatched ')'"),
    ("country:SE country:NO", 11, "expected AND or OR"),
    ("contry:SE", 0, "unknown key 'contry'"),
    ("country:", 8, "needs a value"),
    ("country:SE AND sweden", 15, "not 'sweden'"),
    ('operator:"Tele2', 9, "unterminated quote"),
    ("AND country:SE", 0, "found 'AND'"),
])
def test_bad_input_names_the_position(expr: str, position: int, says: str) -> None:
    with pytest.raises(SelectionError) as err:
        Selection.parse(expr)
    assert err.value.position == position
    assert says in str(err.value)
    caret_line = str(err.value).splitlines()[-1]
    assert caret_line.index("^") == position + 2


# A reference: expression trees rendered to text and evaluated directly.
@dataclass(frozen=True)
class Term:
    key: str
    value: str


@dataclass(frozen=True)
class Op:
    kind: str  # AND, OR, NOT
    parts: tuple[object, ...]


TERMS = st.sampled_from([
    Term("country", "SE"), Term("country", "NO"), Term("operator", "240-01"),
    Term("operator", "Tre"), Term("mobility", "mobile"), Term("tag", "roof"),
    Term("arch", "amd64"), Term("node", "no-01"),
])
TREES = st.recursive(TERMS, lambda inner: st.one_of(
    st.builds(lambda p: Op("NOT", (p,)), inner),
    st.builds(lambda a, b: Op("AND", (a, b)), inner, inner),
    st.builds(lambda a, b: Op("OR", (a, b)), inner, inner),
), max_leaves=8)


def render(t: object) -> str:
    if isinstance(t, Term):
        return f"{t.key}:{t.value}"
    assert isinstance(t, Op)
    if t.kind == "NOT":
        return f"NOT ({render(t.parts[0])})"
    return f"({render(t.parts[0])}) {t.kind} ({render(t.parts[1])})"


def reference(t: object, n: NodeFacts, s: SimFacts) -> bool:
    if isinstance(t, Term):
        v = t.value.casefold()
        return {
            "country": n.country.casefold() == v,
            "operator": v in (s.mcc_mnc.casefold(), s.operator_name.casefold()),
            "mobility": n.mobility.casefold() == v,
            "tag": v in n.tags,
            "arch": n.architecture.casefold() == v,
            "node": n.id == v,
        }[t.key]
    assert isinstance(t, Op)
    values = [reference(p, n, s) for p in t.parts]
    return not values[0] if t.kind == "NOT" else all(values) if t.kind == "AND" else any(values)


@given(TREES)
def test_parser_agrees_with_the_reference(tree: object) -> None:
    sel = Selection.parse(render(tree))
    for node in FLEET:
        for sim in node.sims:
            assert sel.matches(node, sim) == reference(tree, node, sim)


@settings(max_examples=300)
@given(st.text(alphabet='ab:() "ANDORT*,-', max_size=30))
def test_garbage_gives_a_selection_error_or_a_selection(text: str) -> None:
    try:
        Selection.parse(text)
    except SelectionError as e:
        assert 0 <= e.position <= len(text)
