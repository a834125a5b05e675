"""The node's health from /proc and /sys (pure parsers on recorded text) and the
sampler's recording of it."""

from __future__ import annotations

import json
from pathlib import Path

from node_agent.metadata.sampler import MetadataSampler
from node_agent.metadata.system import (
    CpuTimes,
    SystemReader,
    cpu_pct,
    hottest_c,
    parse_cpu_times,
    parse_mem_pct,
)

STAT_1 = "cpu  1000 0 500 8000 500 0 0 0 0 0\ncpu0 500 0 250 4000 250 0 0 0 0 0\nintr 1\n"
STAT_2 = "cpu  1600 0 700 8800 600 0 0 0 0 0\ncpu0 800 0 350 4400 300 0 0 0 0 0\nintr 2\n"
MEMINFO = "MemTotal:       16000000 kB\nMemFree:         2000000 kB\nMemAvailable:    4000000 kB\n"


def test_cpu_load_is_the_busy_share_between_two_readings() -> None:
    a, b = parse_cpu_times(STAT_1), parse_cpu_times(STAT_2)
    assert a == CpuTimes(busy=1500, total=10000)
    # busy +800 of +1700 ticks (idle +800, iowait +100 are not busy)
    assert cpu_pct(a, b) == 47.1
    assert cpu_pct(None, b) is None and cpu_pct(b, a) is None
    assert parse_cpu_times("intr 1\n") is None


def test_memory_and_temperature() -> None:
    assert parse_mem_pct(MEMINFO) == 75.0
    assert parse_mem_pct("MemFree: 1 kB\n") is None
    assert hottest_c(["45000\n", "61500\n", "garbage", "-273000"]) == 61.5
    assert hottest_c([]) is None


def test_reader_and_sampler_record_the_node_health(tmp_path: Path) -> None:
    proc, thermal = tmp_path / "proc", tmp_path / "thermal"
    (thermal / "thermal_zone0").mkdir(parents=True)
    (thermal / "thermal_zone0" / "temp").write_text("52000\n")
    proc.mkdir()
    (proc / "stat").write_text(STAT_1)
    (proc / "meminfo").write_text(MEMINFO)
    reader = SystemReader(tmp_path, proc=proc, thermal=thermal)
    sampler = MetadataSampler({}, system=reader)
    with sampler.recording(tmp_path / "run"):
        (proc / "stat").write_text(STAT_2)
    lines = (tmp_path / "run" / "meta" / "system.jsonl").read_text().splitlines()
    first, last = (json.loads(line) for line in lines)
    assert first["cpu_pct"] is None  # one reading: no load yet
    assert (last["cpu_pct"], last["mem_pct"], last["temperature_c"]) == (47.1, 75.0, 52.0)
    assert last["disk_free_bytes"] > 0
    latest = sampler.latest_system()
    assert latest is not None and latest.cpu_pct == 47.1


def test_a_heartbeat_carries_each_sample_once(tmp_path: Path) -> None:
    """Heartbeats come more often than samples: a sample a heartbeat delivered is not
    sent again; a newer one is."""
    from node_agent.agent import Agent
    from node_agent.config import parse_config

    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text(STAT_1)
    (proc / "meminfo").write_text(MEMINFO)
    sampler = MetadataSampler({}, system=SystemReader(tmp_path, proc=proc,
                                                      thermal=tmp_path / "none"))
    config = parse_config({
        "node_id": "se-01", "orchestrator_url": "http://o:8080", "state_dir": str(tmp_path),
        "netns_container": "ns",
        "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
                        "address": "10.0.0.2", "server_address": "10.0.0.1"}]},
        {"TESTBED_NODE_TOKEN": "tok"})
    a = Agent(config, client=None, runner=None, counters=None,  # type: ignore[arg-type]
              metadata=sampler)
    assert a._live_metadata() == (None, {})  # nothing sampled yet
    sampler.sample_once()
    meta, marks = a._live_metadata()
    assert meta is not None and meta.system is not None and meta.modems == []
    assert a._live_metadata()[0] is not None  # not delivered yet: offered again
    a._metadata_sent.update(marks)  # the heartbeat went through
    assert a._live_metadata() == (None, {})
    (proc / "stat").write_text(STAT_2)
    sampler.sample_once()
    meta, _ = a._live_metadata()
    assert meta is not None and meta.system is not None and meta.system["cpu_pct"] == 47.1
