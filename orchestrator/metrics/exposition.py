"""Prometheus's text format, written directly for the big labelled gauge families (pure).

At 10,000 nodes the full view of ``/metrics`` is 170,000 samples (5 per node, 4 per
SIM). prometheus_client builds a ``Sample`` per value and, in ``generate_latest``,
escapes and sorts each sample's labels again: two thirds of a scrape's 1.8 s of CPU
(bench/metrics-RESULTS.md), all of it holding the interpreter's lock that the API
worker's heartbeats need. Here a node's or a SIM's label set is escaped and joined once
and shared by every family that shows it, and each sample is one string. The bytes are
those ``generate_latest`` writes for the same families (labels sorted by name, values
in its ``floatToGoString``): tests compare the two.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.utils import floatToGoString


def escape_label_value(value: str) -> str:
    """A label value as the text format quotes it: backslash, double quote and newline
    escaped (the format's only three)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def label_set(pairs: Iterable[tuple[str, str]]) -> str:
    """The inside of a sample's braces, ``a="x",b="y"``. Give the labels sorted by
    name, as prometheus_client writes them (not sorted again here: this runs once per
    node and SIM)."""
    return ",".join([f'{name}="{escape_label_value(value)}"' for name, value in pairs])


#: Integers nearer 0 than this are exact as floats, whose ``repr`` is then their digits
#: and ".0" (what :func:`sample_value` writes without making the float).
_EXACT_INT = 2**53
#: Go writes a positive float with an exponent from 7 digits before the point on
#: (``floatToGoString``: "Go switches to exponents sooner than Python").
_GO_EXPONENT_DIGITS = 7


def sample_value(value: float) -> str:
    """A sample's value as prometheus_client's ``floatToGoString`` writes it, computed
    from the digits for integers (byte counts, most of the values; that function goes
    through ``repr`` of a float and a search for its point) and by it otherwise."""
    if type(value) is int and -_EXACT_INT < value < _EXACT_INT:
        digits = str(value)
        if value > 0 and len(digits) >= _GO_EXPONENT_DIGITS:
            mantissa = f"{digits[0]}.{digits[1:]}0".rstrip("0.")
            return f"{mantissa}e+{len(digits) - 1:02d}"
        return f"{digits}.0"
    return floatToGoString(value)  # type: ignore[no-untyped-call,no-any-return]


class GaugeText:
    """One gauge family in the text format: its ``# HELP`` and ``# TYPE`` lines, then a
    line per sample. :meth:`add` takes a label set made once by :func:`label_set`."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name = name
        self.documentation = documentation
        self._lines: list[str] = []

    def add(self, labels: str, value: float) -> None:
        self._lines.append(f"{self.name}{{{labels}}} {sample_value(value)}\n")

    def __len__(self) -> int:
        return len(self._lines)

    def text(self) -> str:
        doc = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        return "".join([f"# HELP {self.name} {doc}\n# TYPE {self.name} gauge\n",
                        *self._lines])


def encode(families: Sequence[GaugeText]) -> bytes:
    """The families' text, one after the other, as the body's bytes."""
    return "".join(f.text() for f in families).encode("utf-8")
