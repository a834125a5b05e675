"""Archived bundles reach InfluxDB; an outage of the store loses nothing.

Real parts: the orchestrator app on SQLite, a real influxd, real bundles uploaded
through the agent API. Ingest is a separate pass after archiving, so an upload succeeds
while the store is down and the run's points are written once it is back.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.analysis.capture import CaptureFlows, reference_flows
from orchestrator.services import flowtool
from orchestrator.services.context import Context
from orchestrator.services.ingest import ingest_pending, reset_ingest
from testbed_common import wire
from tests.conftest import require
from tests.integration import influxd
from tests.integration.conftest import Api, upload_tat_run

BINS = 31  # 100 ms receiver bins in the recorded 3 s transfer
FIXTURES = Path(__file__).parents[1] / "unit" / "fixtures"

pytestmark = pytest.mark.requires(influxd.available())




def _count(ctx: Context, run_id: str) -> int:
    from orchestrator.timeseries.influx import InfluxClient

    assert isinstance(ctx.timeseries, InfluxClient)
    series = ctx.timeseries.query(f"SELECT count(bps) FROM tat WHERE run = '{run_id}'")
    return int(series[0].values[0][1]) if series else 0


def test_archived_run_is_written_and_an_outage_loses_nothing(
    api_influx: Api, store: influxd.Influxd, tmp_path: Path
) -> None:
    api = api_influx
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    assert ctx.timeseries is not None
    ctx.timeseries.create_database()  # type: ignore[attr-defined]
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])

    first = upload_tat_run(api, token, tmp_path, system=True)
    done = ingest_pending(ctx, ctx.timeseries)
    assert (done.written_runs, done.stopped) == (1, None)
    assert _count(ctx, first) == BINS
    # an ad-hoc run is its own session (the pages pair TAT and ABw within one)
    tagged = ctx.timeseries.query(  # type: ignore[attr-defined]
        f"SELECT count(bps) FROM tat WHERE session = '{first}'")
    assert tagged[0].values[0][1] == BINS
    # the node's health over the run, and the missing modem samples said on the run
    health = ctx.timeseries.query(  # type: ignore[attr-defined]
        f"SELECT cpu_pct, temperature_c FROM system WHERE run = '{first}'")
    assert [row[1:] for row in health[0].values] == [[33.0, 48.0]]
    shown = api.client.get(f"/api/v1/runs/{first}", headers=api.admin).json()
    assert shown["ingest_note"].startswith("meta/modem.jsonl: absent; the run has no modem")

    store.stop()  # InfluxDB goes down during ingest
    api.clock.advance(60)
    second = upload_tat_run(api, token, tmp_path)  # the upload itself still succeeds
    assert api.client.get(f"/api/v1/runs/{second}", headers=api.admin).json()["state"] == "done"
    down = ingest_pending(ctx, ctx.timeseries)
    assert down.written_runs == 0 and down.stopped is not None
    assert list(api.settings.archive_dir.rglob("bundle.tar.gz"))  # archived all the same

    store.start()  # back: the pending run is written, the first is not written twice
    back = ingest_pending(ctx, ctx.timeseries)
    assert back.written_runs == 1
    assert (_count(ctx, first), _count(ctx, second)) == (BINS, BINS)

    # a rebuild from the raw archive writes the same points again, idempotently
    assert reset_ingest(ctx) == 2
    assert ingest_pending(ctx, ctx.timeseries).written_runs == 2
    assert (_count(ctx, first), _count(ctx, second)) == (BINS, BINS)


def test_heartbeat_metadata_reaches_the_store_and_waits_out_an_outage(
    api_influx: Api, store: influxd.Influxd
) -> None:
    """A node's latest modem, GPS and system samples ride on its heartbeat and become
    points tagged with the node (no run); while InfluxDB is down they wait."""
    from orchestrator.timeseries.influx import InfluxClient, TimeSeriesError

    api = api_influx
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    assert isinstance(ctx.timeseries, InfluxClient)
    ctx.timeseries.create_database()
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])

    def beat(t: str, cpu: float) -> None:
        meta = wire.LiveMetadata(
            modems=[{"time": t, "interface": "op0", "mcc_mnc": "240-01", "operator": "Telia",
                     "rat": "LTE", "rsrp": -91.5, "sinr": 14.0, "cell_id": 151149761,
                     "band": "B20"}],
            gps={"time": t, "lat": 59.91, "lon": 10.75, "alt": None, "speed": 27.8,
                 "fix": "2d"},
            system={"time": t, "cpu_pct": cpu, "mem_pct": 41.0, "temperature_c": None,
                    "disk_free_bytes": 5 * 10**9})
        hb = wire.Heartbeat(sent_at=api.clock.now(), interfaces=[], disk_free_bytes=10**9,
                            metadata=meta)
        r = api.client.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=api.node(token),
                            json=hb.model_dump(mode="json"))
        assert r.status_code == 200, r.text

    def rows(q: str) -> list[list[Any]]:
        assert isinstance(ctx.timeseries, InfluxClient)
        return [row for s in ctx.timeseries.query(q) for row in s.values]

    noon_ns = 1_795_435_200 * 10**9  # 2026-11-23T12:00:00Z
    beat("2026-11-23T12:00:00+00:00", 12.5)
    assert ctx.live.flush(ctx.timeseries) == 3
    assert rows("SELECT cpu_pct, disk_free_bytes FROM system WHERE node = 'se-01'") == [
        [noon_ns, 12.5, 5 * 10**9]]
    assert rows("SELECT band, cell_id FROM modem WHERE operator = '240-01'") == [
        [noon_ns, "B20", 151149761]]
    assert rows("SELECT lat FROM gps WHERE node = 'se-01'") == [[noon_ns, 59.91]]

    store.stop()
    beat("2026-11-23T12:00:05+00:00", 80.0)  # the heartbeat is answered all the same
    with pytest.raises(TimeSeriesError):
        ctx.live.flush(ctx.timeseries)
    assert len(ctx.live) == 3  # kept for later
    store.start()
    assert ctx.live.flush(ctx.timeseries) == 3
    assert [r[1] for r in rows("SELECT cpu_pct FROM system")] == [12.5, 80.0]


def test_clean_rebuild_replaces_an_older_conversion_and_keeps_live_series(
    api_influx: Api, tmp_path: Path
) -> None:
    """Points an older conversion wrote for a run with other tags or at other times
    (here: a stale session tag, an hour early) are gone after a clean rebuild; the
    run's points are all there, at once and a while later, and series without a run
    (heartbeat samples) are untouched."""
    from orchestrator.services.ingest import rebuild
    from orchestrator.timeseries.influx import InfluxClient
    from orchestrator.timeseries.lineprotocol import Point

    api = api_influx
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    assert isinstance(ctx.timeseries, InfluxClient)
    ctx.timeseries.create_database()
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = upload_tat_run(api, token, tmp_path)
    assert ingest_pending(ctx, ctx.timeseries).written_runs == 1
    hour_ns = 3600 * 10**9
    first = ctx.timeseries.query(f"SELECT first(bps) FROM tat WHERE run = '{run_id}'")
    t0 = int(first[0].values[0][0])
    ctx.timeseries.write([
        Point("tat", {"bps": 1.0}, t0 - hour_ns + i, {"run": run_id, "session": "old"})
        for i in range(5)] + [
        Point("system", {"cpu_pct": 5.0}, t0, {"node": "se-01"})])  # live sample, no run
    assert _count(ctx, run_id) == BINS + 5

    plain = rebuild(ctx, ctx.timeseries)
    assert (plain.marked, plain.written_runs) == (1, 1)
    assert _count(ctx, run_id) == BINS + 5  # in place: the stale points stay

    done = rebuild(ctx, ctx.timeseries, clean=True)
    assert (done.marked, done.written_runs, done.stopped) == (1, 1, None)
    assert _count(ctx, run_id) == BINS
    time.sleep(2)  # and they stay written (no delayed tombstone takes them)
    assert _count(ctx, run_id) == BINS
    stale = ctx.timeseries.query("SELECT count(bps) FROM tat WHERE session = 'old'")
    assert stale == []
    live = ctx.timeseries.query("SELECT count(cpu_pct) FROM system WHERE node = 'se-01'")
    assert live[0].values[0][1] == 1


@pytest.mark.parametrize("compiled", [True, False], ids=["testbed-flows", "fallback"])
def test_a_bundles_capture_is_analysed_by_the_compiled_tool(
    api_influx: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    """Ingest spools the capture out of the archived bundle and runs testbed-flows on
    it; the flows points in InfluxDB carry the reference's figures, and a capture cut
    short gives its flows before the damage and the same note the reference words.
    Without the tool (a checkout never built) the Python reference writes the same."""
    if compiled:
        require(flowtool.find_tool() is not None,
                "needs testbed-flows (cd tools && cargo build --release -p flows)")
    else:
        monkeypatch.setattr(flowtool, "find_tool", lambda: None)
    from orchestrator.timeseries.influx import InfluxClient

    api = api_influx
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    assert isinstance(ctx.timeseries, InfluxClient)
    ctx.timeseries.create_database()
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    calls: list[Path] = []
    real = flowtool.analyse_file

    def spy(path: Path, *, tool: str, bin_s: float = 0.1) -> CaptureFlows:
        calls.append(path)
        return real(path, tool=tool, bin_s=bin_s)

    monkeypatch.setattr(flowtool, "analyse_file", spy)
    capture = (FIXTURES / "tcp-6mbit-tx.pcap").read_bytes()[:-50]
    run_id = upload_tat_run(api, token, tmp_path, capture=capture)
    assert ingest_pending(ctx, ctx.timeseries).written_runs == 1
    if compiled:
        assert len(calls) == 1 and not calls[0].exists()  # spooled, and cleaned up after
    else:
        assert calls == []

    reference = reference_flows(capture)
    assert reference.damage is not None and len(reference.flows) == 2
    rows = sorted(({**r, "direction": s.tags["direction"]} for s in ctx.timeseries.query(
        f"SELECT * FROM flows WHERE run = '{run_id}' GROUP BY direction") for r in s.rows()),
        key=lambda r: -r["payload_bytes"])
    assert [(r["time"], r["direction"], r["payload_bytes"], r["fct_s"], r["rtt_3whs_s"],
             r["retrans_pct"], r["dupack_pct"], r["self_delay_s"]) for r in rows] == [
        (f.start_ns, "uplink" if f.data_from_client else "downlink", f.payload_bytes,
         f.fct_s, f.rtt_3whs_s, f.retrans_pct, f.dupack_pct,
         f.self_delay.mean_s if f.self_delay else None) for f in reference.flows]
    assert rows[0]["direction"] == "uplink"  # the sender's capture of an iperf3 upload
    note = api.client.get(f"/api/v1/runs/{run_id}", headers=api.admin).json()["ingest_note"]
    assert f"results/capture.pcap: {reference.damage}" in note


def test_a_tool_failing_on_a_capture_costs_that_capture_only(
    api_influx: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """testbed-flows exiting non-zero (here /bin/false in its place) leaves a note on
    the capture; the run's other points are written all the same."""
    monkeypatch.setenv(flowtool.ENV, "/bin/false")
    api = api_influx
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    assert ctx.timeseries is not None
    ctx.timeseries.create_database()  # type: ignore[attr-defined]
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = upload_tat_run(api, token, tmp_path,
                         capture=(FIXTURES / "tcp-6mbit-rx.pcap").read_bytes())
    assert ingest_pending(ctx, ctx.timeseries).written_runs == 1
    assert _count(ctx, run_id) == BINS
    note = api.client.get(f"/api/v1/runs/{run_id}", headers=api.admin).json()["ingest_note"]
    assert "results/capture.pcap: not turned into points: testbed-flows failed" in note
