"""The heartbeat points' buffer: bounded, written oldest first, nothing lost on a
failed write (pure logic; the store itself is in tests/integration/test_ingest.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from orchestrator.timeseries.lineprotocol import Point
from orchestrator.timeseries.live import LiveBuffer
from orchestrator.timeseries.schema import RunContext, bundle_points, live_points
from tests.conftest import experiments


def _points(*times: int) -> list[Point]:
    return [Point("system", {"cpu_pct": 1.0}, t, {"node": "n"}) for t in times]


class Sink:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.got: list[int] = []

    def write(self, points: Sequence[Point]) -> int:
        if self.fail:
            raise ConnectionError("store down")
        self.got += [p.time_ns for p in points]
        return len(points)


def test_a_failed_write_keeps_the_points_in_order_and_the_buffer_bounded() -> None:
    buf = LiveBuffer(capacity=4)
    buf.add(_points(1, 2, 3))
    with pytest.raises(ConnectionError):
        buf.flush(Sink(fail=True))
    buf.add(_points(4, 5))  # over capacity: the oldest goes, and is counted
    assert (len(buf), buf.dropped) == (4, 1)
    sink = Sink()
    assert buf.flush(sink, batch=3) == 4
    assert sink.got == [2, 3, 4, 5] and len(buf) == 0


def test_live_and_bundle_samples_become_the_same_points() -> None:
    system = {"time": "2026-11-23T12:00:00+00:00", "cpu_pct": 12.5, "mem_pct": 40.0,
              "temperature_c": None, "disk_free_bytes": 10**9}
    ctx = RunContext(node="se-01", country="SE")
    [live] = live_points(modems=[], gps=None, system=system, ctx=ctx)
    bundle = bundle_points({"meta/system.jsonl": b'{"time": "2026-11-23T12:00:00+00:00", '
                            b'"cpu_pct": 12.5, "mem_pct": 40.0, "temperature_c": null, '
                            b'"disk_free_bytes": 1000000000}\n'}, ctx, catalogue=experiments())
    assert bundle.points == [live]
    assert [n.split(":")[0] for n in bundle.notes] == ["meta/modem.jsonl"]  # absent
    assert live.tags == {"node": "se-01", "country": "SE"}
    assert live.fields["temperature_c"] is None and live.fields["disk_free_bytes"] == 10**9
