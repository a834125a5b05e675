"""Bounded reading of untrusted bundle content: the error type and the one JSON loader.

Everything the orchestrator parses out of a node's bundle (the manifest, result files,
metadata JSON lines) comes through :func:`load_json` / :func:`load_json_lines`. They
refuse, with :class:`BundleError`, what would cost more than its size: a document over
a byte cap, and nesting deeper than a depth cap, found by a cheap scan *before*
``json.loads`` recurses (CPython's parser recurses per level, so ``[[[[...`` a million
deep raises RecursionError, and a document that parses near the limit can still make
later code that walks or dumps it overflow the stack).
"""

from __future__ import annotations

import json
import re
from typing import Any

#: Deepest nesting accepted. The testbed's own documents nest 4-5 levels (a manifest's
#: file entries, iperf3's intervals/streams); 64 leaves room and stays far below the
#: interpreter's recursion limit (1000) wherever the document is later walked.
MAX_JSON_DEPTH = 64

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
#: Objects count as arrays for depth: ``{`` becomes ``[``, ``}`` becomes ``]``.
_UNIFY = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")


class BundleError(ValueError):
    """The bundle (or a file in it) is malformed or hostile; the message says what and
    where."""


def _brackets(data: bytes) -> bytes:
    """The brackets of JSON text ``data`` outside strings, in order, objects' as
    arrays' (at C speed)."""
    return _STRING.sub(b"", data).translate(_UNIFY, _NOT_BRACKET)


def nesting_depth(data: bytes, *, stop_after: int) -> int:
    """How deep the brackets of JSON text ``data`` nest, counted up to ``stop_after + 1``.

    Strings are cut out and everything but brackets dropped; then each pass removes
    every innermost pair (``bytes.replace``, no object per match), so the number of
    passes is the depth. Raises
    :class:`BundleError` when brackets do not balance (such text is not JSON, and
    ``json.loads`` would recurse into it before noticing).
    """
    return _depth(_brackets(data), stop_after=stop_after)


def _depth(brackets: bytes, *, stop_after: int) -> int:
    depth = 0
    while brackets and depth <= stop_after:
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            raise BundleError("brackets do not balance")
        brackets, depth = shorter, depth + 1
    return depth


def load_json(
    data: bytes, *, what: str, max_bytes: int, max_depth: int = MAX_JSON_DEPTH,
    max_containers: int | None = None,
) -> Any:
    """``data`` parsed as JSON, or :class:`BundleError` naming ``what`` and the bound
    it broke (size, depth, number of objects and arrays, encoding or syntax).

    ``max_containers`` bounds what parsing costs: an empty object is 2 bytes of text
    and 64 of memory, while any other value costs at most ~10 times its text."""
    if len(data) > max_bytes:
        raise BundleError(
            f"{what}: {len(data)} bytes of JSON, over the {max_bytes}-byte cap; write "
            "large results as JSON lines or raw files"
        )
    try:
        data.decode("utf-8")
        brackets = _brackets(data)
        if max_containers is not None and len(brackets) > 2 * max_containers:
            raise BundleError(f"JSON holds more than {max_containers} objects and arrays")
        if _depth(brackets, stop_after=max_depth) > max_depth:
            raise BundleError(f"JSON nested deeper than {max_depth} levels")
        return json.loads(data)
    except BundleError as e:
        raise BundleError(f"{what} is refused: {e}") from e
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise BundleError(f"{what} is not valid UTF-8 JSON: {e}") from e


def load_json_lines(
    data: bytes, *, what: str, max_bytes: int, max_depth: int = MAX_JSON_DEPTH
) -> list[Any]:
    """Every non-blank line of ``data`` parsed by :func:`load_json` (the file's size is
    capped as a whole)."""
    if len(data) > max_bytes:
        raise BundleError(f"{what}: {len(data)} bytes, over the {max_bytes}-byte cap")
    return [
        load_json(line, what=f"{what} line {n}", max_bytes=max_bytes, max_depth=max_depth)
        for n, line in enumerate(data.splitlines(), start=1)
        if line.strip()
    ]
