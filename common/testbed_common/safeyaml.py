"""The one YAML loader of the project: every YAML document the orchestrator, its CLI or
a node agent reads (experiment manifests, campaign specs, fleet files, agent configs,
parameter values) is read by :func:`load`. A test (tests/unit/test_safeyaml.py) fails
when a new call site reads YAML any other way.

Why not ``yaml.safe_load``: it is safe against code, not against cost. Aliases share
one object, so ``safe_load`` returns at once, but nine levels of ten aliases each (the
"billion laughs", 90 aliases in 300 bytes) stand for 10^9 values, and whatever walks
the result (JSON encoding, pydantic validation, ``deepcopy``) pays for all of them; an
alias may even point into its own anchor, making a cycle no encoder finishes. And the
composer recurses once per level of nesting, so ``[[[[...`` a few thousand deep raises
RecursionError. :func:`load` refuses, with :class:`YamlRefused` naming the document and
the bound:

- a document over ``max_bytes``;
- more than ``max_aliases`` aliases;
- nesting deeper than ``max_depth`` levels (counted as the document is composed, before
  the composer could recurse further);
- an alias inside its own anchor (a cycle);
- a document whose values, aliases expanded, number more than ``max_expansion`` times
  its bytes (plus a small allowance): a value is at least a byte of text, so a document
  without aliases never comes near it.

Expansion is counted on the composed node graph, each node once (a shared node's count
is reused wherever it is referenced), so the check costs the size of the text, not of
the expansion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode


@dataclass(frozen=True)
class YamlLimits:
    """What one YAML document may cost; each bound's reason is in the module docstring."""

    #: Bytes of text. The largest documents here are fleet files: 1,000 nodes take
    #: about 300 kB.
    max_bytes: int = 4 * 1024**2
    #: Aliases (``*name``). The project's own documents use none; a hand-written spec
    #: may reuse a block or two.
    max_aliases: int = 64
    #: Levels of nesting. The project's documents nest 4-5 levels.
    max_depth: int = 64
    #: Values after expansion, per byte of text (plus :attr:`expansion_allowance`).
    max_expansion: int = 2
    expansion_allowance: int = 10_000


class YamlRefused(ValueError):
    """The document is not YAML, or costs more than its bounds; the message names the
    document and what to change."""


class _Refusal(yaml.YAMLError):
    """Raised inside the composer; :func:`load` turns it into :class:`YamlRefused`."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` whose composer counts aliases and depth as it goes."""

    def __init__(self, stream: str, limits: YamlLimits) -> None:
        super().__init__(stream)
        self.limits = limits
        self.aliases = 0
        self.depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > self.limits.max_aliases:
                raise _Refusal(f"more than {self.limits.max_aliases} aliases")
        self.depth += 1
        try:
            if self.depth > self.limits.max_depth:
                raise _Refusal(f"nested deeper than {self.limits.max_depth} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def expanded_size(root: Node, *, stop_after: int) -> int:
    """How many values ``root`` stands for with every alias expanded, counted up to
    ``stop_after + 1``. Iterative (an alias chain may be deeper than the text's
    nesting) and memoised per node; a node reached again while it is still being
    counted is a cycle, refused."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, counted = stack.pop()
        key = id(node)
        if counted:
            total = 1 + sum(sizes[id(child)] for child in _children(node))
            sizes[key] = min(total, stop_after + 1)
            open_nodes.discard(key)
            if total > stop_after:
                return total
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise _Refusal("an alias refers to a node that holds it (a cycle)")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


def load(text: str | bytes, *, what: str, limits: YamlLimits | None = None) -> Any:
    """The single YAML document ``text`` as Python values (SafeLoader's types), or
    :class:`YamlRefused` naming ``what`` and the bound it broke."""
    limits = limits or YamlLimits()
    size = len(text)
    if size > limits.max_bytes:
        raise YamlRefused(f"{what}: {size} bytes of YAML, over the {limits.max_bytes}-byte "
                          "limit")
    try:
        source = text.decode("utf-8") if isinstance(text, bytes) else text
    except UnicodeDecodeError as e:
        raise YamlRefused(f"{what} is not UTF-8 text: {e}") from e
    loader = _BoundedLoader(source, limits)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        bound = limits.max_expansion * size + limits.expansion_allowance
        if expanded_size(node, stop_after=bound) > bound:
            raise _Refusal(f"its aliases expand to more than {bound} values "
                           f"({limits.max_expansion} per byte of text); write the "
                           "values out instead")
        return loader.construct_document(node)
    except _Refusal as e:
        raise YamlRefused(f"{what} is refused: {e}") from e
    except yaml.YAMLError as e:
        raise YamlRefused(f"{what} is not valid YAML: {e}") from e
    except RecursionError as e:  # a backstop: the depth bound comes first
        raise YamlRefused(f"{what} is refused: nested too deep") from e
    finally:
        loader.dispose()
