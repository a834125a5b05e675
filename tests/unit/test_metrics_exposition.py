"""The text format written directly for the big families (metrics.exposition) is byte
for byte what prometheus_client's ``generate_latest`` writes for the same families:
values in its ``floatToGoString``, labels sorted and escaped, help and type lines."""

from __future__ import annotations

from collections.abc import Iterator

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString as _untyped_go_string

from orchestrator.metrics.exposition import GaugeText, encode, label_set, sample_value


def floatToGoString(value: float) -> str:  # prometheus_client's name
    return str(_untyped_go_string(value))  # type: ignore[no-untyped-call]


@given(st.integers(min_value=-(2**60), max_value=2**60))
def test_an_integer_is_written_as_prometheus_client_writes_it(value: int) -> None:
    assert sample_value(value) == floatToGoString(value)


@given(st.sampled_from([0, 1, 999_999, 10**6, 2 * 10**9, 2**53 - 1, 2**53, 2**53 + 1])
       | st.integers(min_value=0, max_value=10**17))
def test_byte_counts_around_the_exponent_and_exactness_edges(value: int) -> None:
    assert sample_value(value) == floatToGoString(value)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_a_float_is_written_as_prometheus_client_writes_it(value: float) -> None:
    assert sample_value(value) == floatToGoString(value)


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


label_values = st.text(alphabet=st.sampled_from('ab-_.0"\\\nå€ '), max_size=6)


@given(st.lists(st.tuples(label_values, label_values, st.integers(-(10**12), 10**12)
                          | st.floats(allow_nan=False)), max_size=8))
def test_a_family_is_the_bytes_generate_latest_writes(
        samples: list[tuple[str, str, float]]) -> None:
    help_text = 'Bytes "used"\\ this period\nper SIM'
    ours = GaugeText("testbed_x_bytes", help_text)
    theirs = GaugeMetricFamily("testbed_x_bytes", help_text, labels=["node", "interface"])
    for node, interface, value in samples:
        ours.add(label_set((("interface", interface), ("node", node))), value)
        theirs.add_metric([node, interface], value)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed([theirs]))
    assert encode([ours]) == generate_latest(registry)
    assert len(ours) == len(samples)
