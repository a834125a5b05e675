"""The metadata sampler (fake clock), the live metadata server, and the run's env."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from node_agent.config import parse_config
from node_agent.metadata.gps import GpsSample
from node_agent.metadata.modem import MetadataError, ModemSample
from node_agent.metadata.sampler import AutoModemReader, MetadataSampler, readers_from_config
from node_agent.metadata.server import MetadataServer
from node_agent.runner import build_spec
from testbed_common.wire import Assignment

T0 = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class FakeModem:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.fail = False

    def read(self, interface: str) -> ModemSample | None:
        if self.fail:
            raise MetadataError("modem gone")
        cell = 100 + int((self.clock.now - T0).total_seconds()) // 10  # new cell every 10 s
        return ModemSample(time=self.clock.now, interface=interface, mcc_mnc="240-01",
                           rat="LTE", rsrp=-90.0, cell_id=cell, source="fake")


class FakeGps:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def read(self) -> GpsSample | None:
        return GpsSample(time=self.clock.now, lat=59.4, lon=17.9, alt=38.0, speed=1.0,
                         fix="3d")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sampler_records_a_run_span_with_a_fake_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    sampler = MetadataSampler({"op0": FakeModem(clock), "op1": FakeModem(clock)},
                              FakeGps(clock), interval_s=5)
    sampler.sample_once()  # before the run: latest only, no file
    clock.now += timedelta(seconds=5)
    run_dir = tmp_path / "r-1"
    ticks = 0

    def wait(interval_s: float) -> bool:  # the loop's sleep, on the fake clock
        nonlocal ticks
        assert interval_s == 5
        clock.now += timedelta(seconds=interval_s)
        ticks += 1
        return ticks == 4

    with sampler.recording(run_dir):
        sampler.run_forever(wait)
    modem = lines(run_dir / "meta" / "modem.jsonl")
    times = sorted({m["time"] for m in modem})
    # start sample, four loop samples (the first at once), end sample
    assert len(modem) == 2 * 6
    assert times[0] == (T0 + timedelta(seconds=5)).isoformat()
    assert times[-1] == (T0 + timedelta(seconds=25)).isoformat()
    assert {m["interface"] for m in modem} == {"op0", "op1"}
    assert [m["cell_id"] for m in modem if m["interface"] == "op0"] == \
        [100, 100, 101, 101, 102, 102]
    assert len(lines(run_dir / "meta" / "gps.jsonl")) == 6
    clock.now += timedelta(seconds=5)
    sampler.sample_once()  # after the run: not recorded any more
    assert len(lines(run_dir / "meta" / "modem.jsonl")) == 12
    assert sampler.latest_modems()["op0"].time == T0 + timedelta(seconds=30)


def test_a_failing_reader_keeps_the_last_sample_and_the_others(tmp_path: Path) -> None:
    clock = FakeClock()
    bad = FakeModem(clock)
    sampler = MetadataSampler({"op0": bad, "op1": FakeModem(clock)})
    sampler.sample_once()
    bad.fail = True
    clock.now += timedelta(seconds=5)
    sampler.sample_once()
    latest = sampler.latest_modems()
    assert latest["op0"].time == T0 and latest["op1"].time == T0 + timedelta(seconds=5)


def test_no_gps_source_writes_no_gps_file(tmp_path: Path) -> None:
    sampler = MetadataSampler({"op0": FakeModem(FakeClock())})
    with sampler.recording(tmp_path):
        pass
    assert sorted(p.name for p in (tmp_path / "meta").iterdir()) == ["modem.jsonl"]


@pytest.fixture
def served() -> Iterator[tuple[MetadataSampler, str]]:
    clock = FakeClock()
    sampler = MetadataSampler({"op0": FakeModem(clock)}, FakeGps(clock))
    server = MetadataServer(sampler, port=0)
    server.start()
    try:
        yield sampler, f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_server_answers_the_latest_sample(served: tuple[MetadataSampler, str]) -> None:
    sampler, url = served
    assert get(url + "/modem") == (200, {})
    assert get(url + "/modem/op0")[0] == 404
    sampler.sample_once()
    status, body = get(url + "/modem")
    assert status == 200 and list(body) == ["op0"]
    assert body["op0"]["cell_id"] == 100 and body["op0"]["time"] == T0.isoformat()
    assert get(url + "/modem/op0") == (200, body["op0"])
    status, fix = get(url + "/gps")
    assert status == 200 and (fix["lat"], fix["fix"]) == (59.4, "3d")
    status, err = get(url + "/modem/op9")
    assert status == 404 and "op9" in err["error"]
    assert get(url + "/nothing")[0] == 404


def test_server_is_read_only(served: tuple[MetadataSampler, str]) -> None:
    """A run may read the live metadata, never write it: every other method is 405."""
    _sampler, url = served
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        req = urllib.request.Request(url + "/modem", data=b"{}", method=method)
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(req, timeout=5)
        assert caught.value.code == 405, method
        assert caught.value.headers["Allow"] == "GET"
        assert "read-only" in json.loads(caught.value.read())["error"]
        caught.value.close()


def test_the_server_listens_on_one_more_address(served: tuple[MetadataSampler, str]) -> None:
    """A confined run's gateway gets a listener of its own for the run's time."""
    sampler, _url = served
    other = MetadataServer(sampler, port=0)
    try:
        also = other.listen_also("127.0.0.2")
        try:
            assert get(f"http://127.0.0.2:{also.port}/modem") == (200, {})
        finally:
            also.close()
    finally:
        other.stop()


def test_the_run_environment_names_the_metadata_server() -> None:
    raw = {"node_id": "n", "orchestrator_url": "http://o", "netns_container": "c",
           "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
                           "server_address": "10.0.0.1"}]}
    a = Assignment(run_id="r-1", experiment="tat", image="i", parameters={}, interface="op0",
                   not_before=T0, deadline=T0 + timedelta(minutes=5), max_bytes=1)
    config = parse_config(raw, {"TESTBED_NODE_TOKEN": "t"})
    assert (config.metadata_interval_s, config.metadata_port, config.gps) == (5.0, 8765, None)
    env = build_spec(a, config, interface_address=None).environment()
    assert env["TESTBED_METADATA_URL"] == "http://127.0.0.1:8765"
    off = parse_config({**raw, "metadata_port": 0}, {"TESTBED_NODE_TOKEN": "t"})
    assert "TESTBED_METADATA_URL" not in build_spec(a, off, interface_address=None).environment()


def test_a_node_without_modemmanager_says_so(tmp_path: Path) -> None:
    """``auto`` with no linkem state and no mmcli: the heartbeat's metadata names the
    missing source instead of carrying nothing; linkem's state, once it appears, clears
    it."""
    raw = {"node_id": "n", "orchestrator_url": "http://o", "netns_container": "c",
           "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
                           "server_address": "10.0.0.1",
                           "metadata": {"linkem_state": str(tmp_path / "{interface}.json")}}]}
    readers = readers_from_config(parse_config(raw, {"TESTBED_NODE_TOKEN": "t"}))
    auto = readers["op0"]
    assert isinstance(auto, AutoModemReader)
    auto.which = lambda _name: None  # no mmcli on PATH
    sampler = MetadataSampler(readers)
    sampler.sample_once()
    meta, _ = sampler.undelivered({})
    assert meta is not None and meta.modems == []
    assert "ModemManager is not installed" in meta.unavailable["modem op0"]
    (tmp_path / "op0.json").write_text(json.dumps(
        {"format_version": 1, "time_unix_ms": 1_700_000_000_000, "rat": "LTE",
         "operator": {"mcc_mnc": "240-01", "name": "Telia"}}))
    sampler.sample_once()
    meta, _ = sampler.undelivered({})
    assert meta is not None and meta.unavailable == {} and meta.modems[0]["rat"] == "LTE"
