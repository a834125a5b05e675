"""The node's position from a real gpsd, fed by gpsfake with a recorded NMEA log
(tests/fixtures/nmea: a GlobalSat BU-353-S4 from gpsd's own regression logs), into the
heartbeat's metadata and from there into a real InfluxDB; and a node without gpsd or
ModemManager that says so in its metadata, on the node's record and on the fleet page.

Real parts: gpsd (Debian's gpsd, started by gpsfake from gpsd-clients), the agent's
metadata sampler built from its configuration, the orchestrator app with its ingest
loop, a throwaway influxd. The expected position is read from the NMEA log itself.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from node_agent.config import AgentConfig, parse_config
from node_agent.interfaces import SysfsCounters, snapshot
from node_agent.metadata.sampler import MetadataSampler, gps_from_config, readers_from_config
from orchestrator.api.app import create_app
from orchestrator.timeseries.influx import InfluxClient
from testbed_common import wire
from tests.conftest import ManualClock
from tests.integration import influxd
from tests.integration.conftest import Api, make_settings
from tests.integration.live import free_port

NMEA = Path(__file__).parents[1] / "fixtures" / "nmea" / "bu353s4.log"
GPSFAKE = shutil.which("gpsfake")
HAS_GPSD = bool(shutil.which("gpsd") or Path("/usr/sbin/gpsd").exists())
NO_GPSD = (None if GPSFAKE and HAS_GPSD
           else "gpsd or gpsfake not installed (apt-get install gpsd gpsd-clients)")


def nmea_degrees(value: str, hemisphere: str) -> float:
    """ddmm.mmmm (or dddmm.mmmm) and N/S/E/W as signed decimal degrees."""
    dot = value.index(".")
    deg = float(value[:dot - 2]) + float(value[dot - 2:]) / 60
    return -deg if hemisphere in "SW" else deg


def logged_fixes() -> dict[str, tuple[float, float, float]]:
    """Each GGA fix of the log by its UTC time of day (HH:MM:SS): lat, lon, altitude."""
    fixes = {}
    for line in NMEA.read_text().splitlines():
        f = line.split("*")[0].split(",")
        if f[0] == "$GPGGA" and f[6] != "0":
            hms = f"{f[1][0:2]}:{f[1][2:4]}:{f[1][4:6]}"
            fixes[hms] = (nmea_degrees(f[2], f[3]), nmea_degrees(f[4], f[5]), float(f[9]))
    return fixes


@pytest.fixture
def gpsd_port(tmp_path: Path) -> Iterator[int]:
    """gpsd on a free port, replaying the log in a loop (20 ms between sentences)."""
    assert GPSFAKE
    port = free_port()
    log = tmp_path / "gpsfake.log"
    with log.open("wb") as out:  # the child keeps its copy
        proc = subprocess.Popen([GPSFAKE, "-q", "-n", "-c", "0.02", "-P", str(port),
                                 str(NMEA)], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 15
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"gpsfake did not start gpsd on port {port}: "
                                f"{log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def agent_config(tmp_path: Path, gps_port: int) -> AgentConfig:
    """Two modems of different models; their metadata source ``auto`` finds no linkem
    state (this is not the emulated fleet) and asks ModemManager."""
    def iface(name: str, mcc_mnc: str, operator: str, model: str) -> dict[str, Any]:
        return {"name": name, "operator": {"mcc_mnc": mcc_mnc, "name": operator},
                "server_address": "10.0.0.1", "modem_model": model,
                "metadata": {"linkem_state": str(tmp_path / "no-linkem" / "{interface}.json")}}
    raw = {"node_id": "nz-01", "orchestrator_url": "http://o", "netns_container": "c",
           "sysfs_net": str(tmp_path / "sys"),
           "gps": {"source": "gpsd", "port": gps_port, "timeout_s": 5},
           "interfaces": [iface("op0", "530-01", "One NZ", "Quectel EM12-G"),
                          iface("op1", "530-05", "Spark", "Sierra Wireless EM7565")]}
    return parse_config(raw, {"TESTBED_NODE_TOKEN": "t"})


def heartbeat(api: Api, token: str, config: AgentConfig,
              sampler: MetadataSampler) -> wire.LiveMetadata:
    """One heartbeat as the agent builds it: the sampler's undelivered samples and
    the interfaces with their modem models."""
    meta, _ = sampler.undelivered({})
    assert meta is not None
    hb = wire.Heartbeat(sent_at=api.clock.now(), disk_free_bytes=10**9, metadata=meta,
                        interfaces=snapshot(config, SysfsCounters(config.sysfs_net),
                                            sampler.detected_models()))
    r = api.client.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=api.node(token),
                        json=hb.model_dump(mode="json"))
    assert r.status_code == 200, r.text
    return meta


@pytest.mark.requires(influxd.available(), NO_GPSD)
def test_gpsd_position_reaches_the_heartbeat_and_influxdb(
        tmp_path: Path, clock: ManualClock, gpsd_port: int) -> None:
    config = agent_config(tmp_path, gpsd_port)
    sampler = MetadataSampler(readers_from_config(config), gps_from_config(config))
    sampler.sample_once()
    with influxd.running() as server:
        settings = make_settings(tmp_path, influx=server.settings("gps"))
        app = create_app(settings, clock=clock, reaper=False)
        with TestClient(app) as client:
            api = Api(client, clock, settings)
            token = api.add_node("nz-01", [("op0", "530-01", "One NZ")])
            meta = heartbeat(api, token, config, sampler)

            # the heartbeat carries gpsd's fix: one of the log's, with its altitude and
            # the receiver's time of day
            gps = meta.gps
            assert gps is not None and gps["fix"] == "3d", meta
            fixes = logged_fixes()
            hms = gps["time"][11:19]
            assert hms in fixes, (gps, sorted(fixes))
            lat, lon, alt = fixes[hms]
            assert gps["lat"] == pytest.approx(lat, abs=1e-6)
            assert gps["lon"] == pytest.approx(lon, abs=1e-6)
            assert gps["alt"] == pytest.approx(alt, abs=0.05)

            # and InfluxDB gets it as the ingest loop writes the heartbeats' points (the
            # loop's own two calls; the app runs without its loops, on a manual clock)
            ctx = app.state.ctx
            assert isinstance(ctx.timeseries, InfluxClient)
            ctx.timeseries.create_database()
            assert ctx.live.flush(ctx.timeseries) == 1
            # at the fix's own time (InfluxQL stops at now() unless told)
            found = ctx.timeseries.query(
                f"SELECT lat, lon, alt_m, node FROM gps WHERE time = '{gps['time']}'")
            rows = [r for series in found for r in series.rows()]
            assert len(rows) == 1, rows
            assert (rows[0]["node"], rows[0]["lat"], rows[0]["lon"], rows[0]["alt_m"]) == (
                "nz-01", gps["lat"], gps["lon"], gps["alt"])

            # no ModemManager here: each modem says so, and the fleet knows the models
            shown = client.get("/api/v1/nodes/nz-01", headers=api.admin).json()
            assert set(shown["metadata_unavailable"]) == {"modem op0", "modem op1"}, shown
            assert all("ModemManager" in why for why in shown["metadata_unavailable"].values())
            assert {i["name"]: i["modem_model"] for i in shown["interfaces"]} == {
                "op0": "Quectel EM12-G", "op1": "Sierra Wireless EM7565"}
        app.state.ctx.db.engine.dispose()


def test_a_node_without_gpsd_says_so(tmp_path: Path, clock: ManualClock) -> None:
    closed = free_port()  # nothing listens: gpsd is not running
    config = agent_config(tmp_path, closed)
    sampler = MetadataSampler(readers_from_config(config), gps_from_config(config))
    sampler.sample_once()
    settings = make_settings(tmp_path)
    app = create_app(settings, clock=clock, reaper=False)
    with TestClient(app) as client:
        api = Api(client, clock, settings)
        token = api.add_node("nz-02", [("op0", "530-01", "One NZ")])
        meta = heartbeat(api, token, config, sampler)
        assert meta.gps is None
        assert f"cannot reach gpsd at 127.0.0.1:{closed}" in meta.unavailable["gps"]
        shown = client.get("/api/v1/nodes/nz-02", headers=api.admin).json()
        assert shown["metadata_unavailable"]["gps"] == meta.unavailable["gps"]
        fleet = client.get("/pages/fleet", headers=api.admin).text
        assert f"gps: unavailable (cannot reach gpsd at 127.0.0.1:{closed}" in fleet
        assert "2 modems: Quectel EM12-G, Sierra Wireless EM7565" in fleet
    app.state.ctx.db.engine.dispose()
