"""The ``testbed.short-flows`` result and the responder's request line (pure), on the
recorded output of a real session.

``short-flows-downlink.json`` and ``.pcap`` are one downlink session over a veth with
an 8 Mbit/s tbf, recorded by tests/integration/test_short_flows_session.py
(TESTBED_RECORD_SHORT_FLOWS): the result the experiment wrote and the client-side
capture taken as the node agent takes it.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from testbed_kit.short_flows import (
    FORMAT,
    LARGEST,
    SMALLEST,
    VERSION,
    ShortFlowsOutputError,
    parse_request,
    parse_result,
    request_line,
    short_sizes,
)

FIXTURES = Path(__file__).parent / "fixtures"


def recorded() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / "short-flows-downlink.json").read_text())
    return doc


def test_eleven_geometric_sizes_from_the_reference() -> None:
    sizes = short_sizes()
    assert len(sizes) == 11 and sizes[0] == SMALLEST == 1388 and sizes[-1] == LARGEST == 327_568
    ratios = [b / a for a, b in pairwise(sizes)]
    assert max(ratios) - min(ratios) < 1e-3  # geometric, to the rounding of whole bytes


@pytest.mark.parametrize("direction,size", [("downlink", 1388), ("uplink", 20 * 1024**2)])
def test_a_request_line_reads_back_as_sent(direction: str, size: int) -> None:
    assert parse_request(request_line(direction, size)) == (direction, size)


@pytest.mark.parametrize("line", [b"down 0\n", b"up -5\n", b"down 2000000000\n", b"GET /\n",
                                  b"down\n", b""])
def test_a_bad_request_line_is_refused_with_a_reason(line: bytes) -> None:
    with pytest.raises(ValueError, match="bytes"):
        parse_request(line)


def test_the_recorded_session_parses() -> None:
    result = parse_result(recorded())
    assert result.direction == "downlink" and result.port == 5301
    assert [f.size_bytes for f in result.flows] == [*short_sizes(), result.long_bytes]
    assert [f.kind for f in result.flows] == ["short"] * 11 + ["long"]
    assert all(f.error is None and f.bytes_moved == f.size_bytes for f in result.flows)
    assert len({f.local_port for f in result.flows}) == 12  # a fresh connection each
    starts = [f.start_unix_s for f in result.flows]
    assert starts == sorted(starts)
    assert result.settings["tcp_sack"] == "1" and result.settings["initcwnd"] == "10"


@pytest.mark.parametrize("change,needle", [
    ({"format": "testbed.tat"}, "not a testbed.short-flows v1"),
    ({"version": 2}, "not a testbed.short-flows v1"),
    ({"direction": "sideways"}, "direction"),
    ({"flows": {}}, "flows"),
    ({"port": "5301"}, "port"),
])
def test_a_result_that_is_not_v1_says_what_is_wrong(change: dict[str, Any], needle: str) -> None:
    doc = {**recorded(), **change}
    with pytest.raises(ShortFlowsOutputError, match=needle):
        parse_result(doc)


def test_a_flow_record_with_a_wrong_field_names_the_flow() -> None:
    doc = recorded()
    doc["flows"][3]["local_port"] = 70000
    with pytest.raises(ShortFlowsOutputError, match="flow 3: local_port 70000"):
        parse_result(doc)
    assert doc["format"] == FORMAT and doc["version"] == VERSION
