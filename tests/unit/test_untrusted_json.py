"""The one loader for JSON out of bundles: size, depth and object count are bounded
before json.loads recurses; every failure is a BundleError naming the file."""

from __future__ import annotations

import pytest

from testbed_common.untrusted import BundleError, load_json, load_json_lines, nesting_depth


@pytest.mark.parametrize(("text", "depth"), [
    (b"1", 0), (b"[]", 1), (b'{"a": [1, {"b": []}]}', 4),
    (b'["[[[[", "\\"]]]{{", {}]', 2),  # brackets in strings, escaped quotes: not counted
    (b'{"a": "\\\\"}', 1),
])
def test_depth_counts_brackets_outside_strings(text: bytes, depth: int) -> None:
    assert nesting_depth(text, stop_after=64) == depth


def test_depth_64_is_read_and_65_refused_without_recursion() -> None:
    assert load_json(b"[" * 64 + b"]" * 64, what="f", max_bytes=1000) is not None
    with pytest.raises(BundleError, match="f is refused: JSON nested deeper than 64"):
        load_json(b"[" * 65 + b"]" * 65, what="f", max_bytes=1000)
    # a million levels (what raised RecursionError, a 500): refused by the scan
    with pytest.raises(BundleError, match="nested deeper"):
        load_json(b'{"a":' * 1_000_000 + b"1" + b"}" * 1_000_000, what="f", max_bytes=10**8)


def test_unbalanced_brackets_are_refused_before_parsing() -> None:
    with pytest.raises(BundleError, match="do not balance"):
        load_json(b"[" * 1_000_000, what="f", max_bytes=10**8)


@pytest.mark.parametrize(("data", "needle"), [
    (b"x" * 11, "over the 10-byte cap"),
    (b'"\xff"', "not valid UTF-8 JSON"),
    (b"{", "do not balance"),
    (b"{]", "not valid UTF-8 JSON"),
    (b"[01]", "not valid UTF-8 JSON"),
])
def test_every_failure_is_a_bundle_error(data: bytes, needle: str) -> None:
    with pytest.raises(BundleError, match=needle):
        load_json(data, what="f", max_bytes=10)


def test_object_count_cap() -> None:
    assert load_json(b"[{}, {}]", what="f", max_bytes=100, max_containers=3) == [{}, {}]
    with pytest.raises(BundleError, match="more than 2 objects and arrays"):
        load_json(b"[{}, {}]", what="f", max_bytes=100, max_containers=2)


def test_json_lines_name_the_line() -> None:
    assert load_json_lines(b'{"a": 1}\n\n[2]\n', what="m.jsonl", max_bytes=100) == [{"a": 1}, [2]]
    with pytest.raises(BundleError, match="m.jsonl line 2 is refused"):
        load_json_lines(b"{}\n" + b"[" * 70 + b"]" * 70, what="m.jsonl", max_bytes=1000)
