"""A skewed node's heartbeat samples are written at orchestrator time, as its runs'
points are: the orchestrator moves them by the clock offset the node reports.

Real parts: the orchestrator app on SQLite, the agent API. The store is configured but
not reached: the test takes the buffered points as the ingest loop would write them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from orchestrator.api.app import create_app
from orchestrator.settings import InfluxSettings
from orchestrator.timeseries.lineprotocol import Point
from orchestrator.timeseries.schema import to_ns
from testbed_common import wire
from tests.conftest import ManualClock
from tests.integration.conftest import Api, make_settings


class Taken:
    def __init__(self) -> None:
        self.points: list[Point] = []

    def write(self, points: Sequence[Point]) -> None:
        self.points.extend(points)


def test_heartbeat_samples_of_a_skewed_node_land_at_orchestrator_time(
    tmp_path: Path, clock: ManualClock
) -> None:
    settings = make_settings(tmp_path, influx=InfluxSettings(url="http://127.0.0.1:9"))
    app = create_app(settings, clock=clock, reaper=False)
    with TestClient(app) as client:
        api = Api(client, clock, settings)
        token = api.add_node("se-01", [("op0", "240-01", "Telia")])
        for offset in (300.0, -300.0, None):
            node_now = clock.now() + timedelta(seconds=offset or 0)
            meta = wire.LiveMetadata(system={"time": node_now.isoformat(), "cpu_pct": 5.0})
            hb = wire.Heartbeat(sent_at=node_now, interfaces=[], disk_free_bytes=10**9,
                                clock_offset_s=offset, metadata=meta)
            r = client.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=api.node(token),
                            json=hb.model_dump(mode="json"))
            assert r.status_code == 200, r.text
            taken = Taken()
            app.state.ctx.live.flush(taken)
            assert [p.time_ns for p in taken.points] == [to_ns(clock.now())], offset
            clock.advance(10)
    app.state.ctx.db.engine.dispose()
