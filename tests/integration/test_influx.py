"""The InfluxDB adapter against a real influxd (Debian's 1.6.7, v1 HTTP API).

Points from a real TAT result (the iperf3 report recorded with the unit fixtures) and
hourly summaries of two nodes are written in small batches, then read back with
GROUP BY time(1h) and by tag. An outage in the middle of a write raises the project's
error with how many points went in; writing the same points again after influxd is
back stores each exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from orchestrator.errors import Invalid, TestbedError
from orchestrator.timeseries.influx import (
    InfluxClient,
    TimeSeriesRejected,
    TimeSeriesUnavailable,
)
from orchestrator.timeseries.lineprotocol import Point
from orchestrator.timeseries.schema import RunContext, point
from studies.tat.points import TAT, TAT_SUMMARY, tat_points
from tests.integration import influxd
from tests.recorded import tat_result

pytestmark = pytest.mark.requires(influxd.available())

HOUR_NS = 3600 * 10**9
T0 = 1_795_312_800 * 10**9  # an hour boundary (2026-11-22 00:00 UTC)


@pytest.fixture(scope="module")
def server() -> Iterator[influxd.Influxd]:
    with influxd.running() as s:
        yield s


@pytest.fixture
def client(server: influxd.Influxd, request: pytest.FixtureRequest) -> Iterator[InfluxClient]:
    db = f"t_{request.node.name[:40]}".replace("-", "_").replace("[", "_").replace("]", "")
    with server.client(db, batch_size=7, backoff_s=0.01) as c:
        c.create_database()
        yield c


def _tat_result() -> dict[str, Any]:
    return tat_result()


def _ctx(node: str, run: str) -> RunContext:
    return RunContext(node=node, country="SE", operator="240-01", operator_name="Telia SE",
                      interface="op0", rat="4G", experiment="tat", campaign="c1", run=run)


def test_tat_result_written_and_read_back(client: InfluxClient) -> None:
    result = _tat_result()
    points = tat_points(result, _ctx("se-01", "r1"))
    assert client.write(points) == len(points) == 32  # 31 bins + summary, 5 batches
    [series] = client.query(
        "SELECT count(bps), sum(bytes) FROM tat WHERE run = 'r1' GROUP BY operator_name")
    assert series.tags == {"operator_name": "Telia SE"}
    row = series.rows()[0]
    assert row["count"] == 31 and row["sum"] == result["bytes"]
    [summary] = client.query(f"SELECT * FROM {TAT_SUMMARY}")
    got = summary.rows()[0]
    assert got["mean_bps"] == pytest.approx(result["mean_bps"])
    assert got["retransmits"] == result["retransmits"] and got["direction"] == "uplink"


def test_hourly_and_per_tag_aggregation(client: InfluxClient) -> None:
    points = [
        point(TAT, _ctx(node, f"{node}-{h}"), {"bps": rate + h * 1e6, "bytes": 1,
                                                 "duration_s": 0.1},
              T0 + h * HOUR_NS + k * 10**8, direction="uplink")
        for node, rate in (("se-01", 10e6), ("se-02", 20e6))
        for h in range(3)
        for k in range(10)
    ]
    assert client.write(points) == 60
    series = client.query(
        f"SELECT mean(bps), count(bps) FROM tat WHERE time >= {T0} "
        f"AND time < {T0 + 3 * HOUR_NS} GROUP BY time(1h), node")
    by_node = {s.tags["node"]: s.rows() for s in series}
    assert sorted(by_node) == ["se-01", "se-02"]
    assert [r["time"] for r in by_node["se-01"]] == [T0 + h * HOUR_NS for h in range(3)]
    assert [r["count"] for r in by_node["se-02"]] == [10, 10, 10]
    assert [r["mean"] for r in by_node["se-02"]] == pytest.approx([20e6, 21e6, 22e6])


def test_awkward_names_survive_the_round_trip(client: InfluxClient) -> None:
    tags = {"operator_name": 'Tele 2, "SE"=yes', "node": "n\\1"}
    client.write([Point("quota", {"note": 'say "hi" \\ bye', "used_bytes": 5}, T0, tags)])
    [series] = client.query(
        "SELECT note, used_bytes FROM quota GROUP BY operator_name, node")
    assert series.tags == tags
    assert series.rows()[0]["note"] == 'say "hi" \\ bye'
    assert series.rows()[0]["used_bytes"] == 5


def test_refusals_are_not_retried_and_say_what_to_do(
    client: InfluxClient, server: influxd.Influxd
) -> None:
    client.write([Point("m", {"v": 1.0}, T0)])
    with pytest.raises(TimeSeriesRejected, match="field type conflict") as info:
        client.write([Point("m", {"v": "text"}, T0 + 1)])
    assert isinstance(info.value, Invalid)
    with InfluxClient(server.url, "no_such_db", writer=server.admin) as other, \
            pytest.raises(TimeSeriesRejected, match="create it"):
        other.write([Point("m", {"v": 1.0}, T0)])
    with pytest.raises(TimeSeriesRejected, match="error parsing query"):
        client.query("SELECT FROM WHERE")


def test_outage_during_a_write_loses_nothing_the_caller_retries(tmp_path: Path) -> None:
    server = influxd.Influxd(tmp_path)
    server.start()
    try:
        writes = 0

        def stop_after_first_write(response: httpx.Response) -> None:
            nonlocal writes
            if response.request.url.path == "/write":
                writes += 1
                if writes == 1:
                    server.stop()  # influxd goes away between two batches

        http = httpx.Client(timeout=5, event_hooks={"response": [stop_after_first_write]})
        sleeps: list[float] = []
        ctx = _ctx("se-01", "r9")
        points = [point(TAT, ctx, {"bps": float(i), "bytes": i, "duration_s": 0.1},
                        T0 + i * 10**8) for i in range(120)]
        with server.client("outage", batch_size=50, retries=2, backoff_s=0.01,
                           sleep=sleeps.append, http=http) as c:
            c.create_database()
            with pytest.raises(TimeSeriesUnavailable) as info:
                c.write(points)
            err = info.value
            assert isinstance(err, TestbedError)
            assert err.written == 50
            assert "Check that influxd is running" in str(err)
            assert sleeps == [0.01, 0.02]  # two retries, doubling backoff

            server.start()  # back on the same data and port; the caller writes again
            assert c.write(points) == 120
            [series] = c.query("SELECT count(bps), sum(bytes) FROM tat")
            assert series.rows()[0]["count"] == 120  # the first 50 not doubled
            assert series.rows()[0]["sum"] == sum(range(120))
    finally:
        server.stop()
