"""The emulated modem: linkem's state file, read as a modem sample."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from node_agent.config import parse_config
from node_agent.metadata.gps import LinkemGpsReader
from node_agent.metadata.modem import LinkemModemReader, MetadataError
from node_agent.metadata.sampler import MetadataSampler, gps_from_config, readers_from_config


def state(cell_id: int, handovers: int, *, t_ms: int = 1763776000000,
          in_outage: bool = False, band: str | None = None,
          position: dict[str, float] | None = None) -> dict[str, Any]:
    return {"band": band, "position": position,
        "format_version": 1, "time_unix_ms": t_ms, "epoch_monotonic_ns": 891164682723,
        "delivered": {"uplink_bps": 9996000.0, "downlink_bps": 12000.0},
        "emulator_time_s": 12.4,
        "operator": {"mcc_mnc": "242-01", "name": "Telenor", "country": "NO"},
        "rat": "LTE", "cell_id": cell_id, "handovers": handovers, "in_outage": in_outage,
        "signal": {"rssi_dbm": -62.5, "rsrp_dbm": -88.8, "rsrq_db": -7.1, "sinr_db": 17.5},
        "local_hour": 14, "diurnal_factor": 0.74, "radio_idle": False, "promotions": 1,
    }


def write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)  # as linkem does: write + rename


def test_linkem_state_is_a_modem_sample(tmp_path: Path) -> None:
    write(tmp_path / "op0.json", state(151149761, 0))
    s = LinkemModemReader(str(tmp_path / "{interface}.json")).read("op0")
    assert s is not None
    assert s.time == datetime.fromtimestamp(1763776000, UTC)
    assert (s.interface, s.mcc_mnc, s.operator, s.rat) == ("op0", "242-01", "Telenor", "LTE")
    assert (s.rssi, s.rsrp, s.rsrq, s.sinr) == (-62.5, -88.8, -7.1, 17.5)
    assert (s.cell_id, s.handovers, s.in_outage, s.source) == (151149761, 0, False, "linkem")


def test_a_handover_is_seen_as_a_cell_id_change(tmp_path: Path) -> None:
    path = tmp_path / "op0.json"
    sampler = MetadataSampler({"op0": LinkemModemReader(str(tmp_path / "{interface}.json"))})
    write(path, state(151149761, 0))
    with sampler.recording(tmp_path / "run"):
        write(path, state(151149762, 1, t_ms=1763776005000, in_outage=True))
        sampler.sample_once()
    assert sampler.latest_modems()["op0"].cell_id == 151149762
    lines = (tmp_path / "run" / "meta" / "modem.jsonl").read_text().splitlines()
    cells = [json.loads(line)["cell_id"] for line in lines]
    assert cells == [151149761, 151149762, 151149762]
    assert json.loads(lines[1])["in_outage"] is True


def test_a_moving_node_reports_band_and_position(tmp_path: Path) -> None:
    """A moving node's profile (``route:``, ``handover.bands``): the emulated modem
    gives the serving cell's band, the emulated GPS the node's position."""
    path = tmp_path / "op0.json"
    config = parse_config(
        {"node_id": "no-01", "orchestrator_url": "http://o", "netns_container": "c",
         "gps": {"source": "linkem", "linkem_state": str(path)},
         "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "242-01", "name": "Telenor"},
                         "server_address": "10.0.0.1",
                         "metadata": {"linkem_state": str(tmp_path / "{interface}.json")}}]},
        {"TESTBED_NODE_TOKEN": "t"})
    gps = gps_from_config(config)
    assert isinstance(gps, LinkemGpsReader)
    assert gps.read() is None  # the link is not up yet: no fix, no error
    sampler = MetadataSampler(readers_from_config(config), gps)
    write(path, state(7, 0, band="B20", position={"lat": 59.9111, "lon": 10.7528,
                                                  "speed_mps": 27.8, "heading_deg": 71.0}))
    with sampler.recording(tmp_path / "run"):
        write(path, state(8, 1, t_ms=1763776030000, band="B3",
                          position={"lat": 59.9140, "lon": 10.7660, "speed_mps": 27.8,
                                    "heading_deg": 71.0}))
        sampler.sample_once()
    fixes = [json.loads(line) for line in
             (tmp_path / "run" / "meta" / "gps.jsonl").read_text().splitlines()]
    assert [(f["lat"], f["lon"], f["fix"]) for f in fixes] == [
        (59.9111, 10.7528, "2d"), (59.914, 10.766, "2d"), (59.914, 10.766, "2d")]
    assert fixes[1]["time"] == "2025-11-22T01:47:10+00:00" and fixes[1]["speed"] == 27.8
    bands = [json.loads(line)["band"] for line in
             (tmp_path / "run" / "meta" / "modem.jsonl").read_text().splitlines()]
    assert bands == ["B20", "B3", "B3"]


def test_a_fixed_node_has_no_emulated_position(tmp_path: Path) -> None:
    write(tmp_path / "op0.json", state(7, 0))
    assert LinkemGpsReader(str(tmp_path / "op0.json")).read() is None
    write(tmp_path / "op0.json", state(7, 0, position={"speed_mps": 3.0}))
    with pytest.raises(MetadataError, match="without lat/lon"):
        LinkemGpsReader(str(tmp_path / "op0.json")).read()


def test_missing_state_file_is_no_modem_unless_linkem_is_required(tmp_path: Path) -> None:
    assert LinkemModemReader(str(tmp_path / "{interface}.json")).read("op0") is None
    config = parse_config(
        {"node_id": "n", "orchestrator_url": "http://o", "netns_container": "c",
         "interfaces": [
             {"name": "op0", "operator": {"mcc_mnc": "242-01", "name": "Telenor"},
              "server_address": "10.0.0.1",
              "metadata": {"source": "linkem",
                           "linkem_state": str(tmp_path / "{interface}.json")}},
             {"name": "op1", "operator": {"mcc_mnc": "242-02", "name": "Telia"},
              "server_address": "10.0.0.2", "metadata": {"source": "none"}},
             {"name": "op2", "operator": {"mcc_mnc": "242-02", "name": "Telia"},
              "server_address": "10.0.0.2"}]},
        {"TESTBED_NODE_TOKEN": "t"},
    )
    readers = readers_from_config(config)
    assert sorted(readers) == ["op0", "op2"]  # op2: auto, the default
    with pytest.raises(MetadataError, match="does not exist"):
        readers["op0"].read("op0")


def test_damaged_state_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "op0.json").write_text("{not json")
    with pytest.raises(MetadataError, match="cannot read linkem state"):
        LinkemModemReader(str(tmp_path / "{interface}.json")).read("op0")
    (tmp_path / "op0.json").write_text('{"format_version": 2}')
    with pytest.raises(MetadataError, match="format_version 2"):
        LinkemModemReader(str(tmp_path / "{interface}.json")).read("op0")


def test_the_agent_bundles_the_modem_samples_of_the_run(tmp_path: Path) -> None:
    import tarfile

    from node_agent.agent import Agent
    from node_agent.engine import ContainerId
    from node_agent.runner import Runner, StopRequest
    from testbed_common.wire import Assignment
    from tests.unit.test_session_end import EndingEngine, Still

    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    state_file = tmp_path / "op0.json"
    write(state_file, state(7, 0))

    class HandoverEngine(EndingEngine):  # the container: a handover while it runs
        def start(self, container: ContainerId) -> None:
            write(state_file, state(8, 1, t_ms=1763776005000))
            self.ended.set()

    config = parse_config({
        "node_id": "se-01", "orchestrator_url": "http://o:8080",
        "state_dir": str(tmp_path / "state"), "netns_container": "ns",
        "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "242-01", "name": "Telenor"},
                        "address": "10.0.0.2", "server_address": "10.0.0.1",
                        "metadata": {"linkem_state": str(tmp_path / "{interface}.json")}}],
    }, {"TESTBED_NODE_TOKEN": "tok"})
    sampler = MetadataSampler(readers_from_config(config))
    runner = Runner(HandoverEngine(after_s=0), counters=Still(), interfaces=["op0"],
                    clock=lambda: now, metadata=sampler)
    a = Agent(config, client=None, runner=runner,  # type: ignore[arg-type]
              counters=None, clock=lambda: now, metadata=sampler)  # type: ignore[arg-type]
    a.execute(Assignment(run_id="r-1", experiment="tat", image="i", parameters={},
                         interface="op0", not_before=now,
                         deadline=now + timedelta(minutes=1), max_bytes=10**6),
              StopRequest())
    [item] = a.spool.pending()
    with tarfile.open(item.path, "r:gz") as tar:
        names = set(tar.getnames())
        handle = tar.extractfile("meta/modem.jsonl")
        assert handle is not None
        cells = [json.loads(line)["cell_id"] for line in handle.read().splitlines()]
    assert {"meta/run.json", "meta/modem.jsonl"} <= names
    assert cells == [7, 8]  # before and after the handover


def test_on_an_emulated_wrong_clock_linkem_samples_are_stamped_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """linkem runs on the true clock; an agent on the fault matrix's emulated skew
    (node_agent.skew) stamps the emulated modem's and GPS's samples on the node's clock,
    as a real modem reader stamps them with the agent's clock."""
    path = tmp_path / "op0.json"
    write(path, state(7, 0, position={"lat": 59.9, "lon": 10.7}))
    true_modem = LinkemModemReader(str(tmp_path / "{interface}.json")).read("op0")
    true_gps = LinkemGpsReader(str(path)).read()
    assert true_modem is not None and true_gps is not None
    monkeypatch.setenv("TESTBED_CLOCK_SKEW_S", "-300")
    monkeypatch.setenv("LD_PRELOAD", "/usr/local/lib/libskewclock.so")
    modem = LinkemModemReader(str(tmp_path / "{interface}.json")).read("op0")
    gps = LinkemGpsReader(str(path)).read()
    assert modem is not None and gps is not None
    assert modem.time == true_modem.time - timedelta(seconds=300)
    assert gps.time == true_gps.time - timedelta(seconds=300)
