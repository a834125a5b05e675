"""Hostile experiments against the agent's real run session on the real Docker engine:
one test per row of docs/security.md's matrix that the node alone answers for (rows 1-6
and 10-12; the network's rows are the run's network's).

Each run is of a small hostile image (tests/fixtures/hostile, built from the project's
base image) with one mode per row, confined as every run is (node_agent.confinement),
with small limits so that each row ends in seconds. For every row the test checks what
a node's owner would: the run ends in a final state with a named reason; the agent's
own loop keeps its pace while it runs (a thread that ticks every 50 ms here stands for
the agent's heartbeat and executor); the next run starts promptly (within 5 s); nothing
outside the run is left or touched (its containers and volumes are gone, the node's
container still runs, the run directory holds no link). Each row's figures go to
build/hostile/figures.jsonl, from which docs/security.md's table is made.
"""

from __future__ import annotations

import json
import os
import resource
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from node_agent.config import RunPolicy
from node_agent.confinement import run_limits
from node_agent.engine import LABEL_RUN, DockerEngine
from node_agent.interfaces import ProcNetDevCounters
from node_agent.runner import DockerRunner, RunOutcome, RunSpec, StopRequest
from node_agent.runnet import HolderNeeds
from testbed_common.bundle import build_bundle, inspect_bundle
from testbed_common.states import RunState
from testbed_common.wire import Operator, RunResources
from tests.integration.test_agent_runner import _docker_client

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
#: The holder's image: the node's own (the agent's).
NODE_IMAGE = "testbed/node:dev"
HOSTILE_IMAGE = "testbed/test-hostile:dev"
SUFFIX = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
NODE_ID = f"tbtest-hostile-{SUFFIX}"
FIGURES = ROOT / "build" / "hostile" / "figures.jsonl"
#: Small bounds, so that each row ends in seconds (a node's defaults are larger).
LIMITS = run_limits(RunResources(memory_mb=64, cpus=0.5, pids=64, results_mb=8,
                                 result_files=500, tmp_mb=8), (), RunPolicy())
#: The next run must start within this of the hostile one's end (issue: 5 s of its slot).
NEXT_START_S = 5.0


@dataclass(frozen=True)
class Rig:
    client: Any
    node: Any
    runner: DockerRunner


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    client = _docker_client()
    if not client.images.list(name=NODE_IMAGE):
        pytest.fail(f"{NODE_IMAGE} is missing: scripts/build-images.sh node")
    # Built from the project's base image each time (seconds: one COPY).
    client.images.build(path=str(ROOT / "tests" / "fixtures" / "hostile"),
                        tag=HOSTILE_IMAGE, rm=True)
    node = client.containers.run(NODE_IMAGE, name=NODE_ID, entrypoint=["sleep", "infinity"],
                                 detach=True)
    try:
        node.reload()
        pid = int(node.attrs["State"]["Pid"])
        runner = DockerRunner(client, counters=ProcNetDevCounters(lambda: pid),
                              node_id=NODE_ID, interfaces=["eth0"], check_interval_s=1.0)
        yield Rig(client, node, runner)
    finally:
        DockerEngine(client, node_id=NODE_ID).remove_leftovers()
        node.remove(force=True)


def _spec(mode: str, *, slot_s: float = 30) -> RunSpec:
    return RunSpec(
        run_id=f"tbtest-h-{mode}-{uuid.uuid4().hex[:6]}", experiment="hostile",
        image=HOSTILE_IMAGE, node_id=NODE_ID, netns_container=NODE_ID, interface="eth0",
        interface_address=None, operator=Operator(mcc_mnc="240-01", name="Telia"),
        server_address="192.0.2.1", parameters={"mode": mode},
        deadline=datetime.now(UTC) + timedelta(seconds=slot_s), max_bytes=10**9,
        limits=LIMITS,
    )


class Pulse:
    """A thread that ticks every 50 ms: the longest gap between its ticks is how long
    the agent's own loops would have stalled."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def _tick(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.05):
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> Pulse:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(frozen=True)
class Row:
    outcome: RunOutcome
    run_dir: Path
    took_s: float
    meta: dict[str, Any]


def _leftovers(rig: Rig, run_id: str) -> list[str]:
    selector = {"label": f"{LABEL_RUN}={run_id}"}
    return ([c.name for c in rig.client.containers.list(all=True, filters=selector)]
            + [v.name for v in rig.client.volumes.list(filters=selector)])


def hostile_run(rig: Rig, tmp_path: Path, mode: str, *, slot_s: float = 30) -> Row:
    """Run ``mode`` to its end, check what every row checks, record its figures."""
    spec = _spec(mode, slot_s=slot_s)
    run_dir = tmp_path / mode
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with Pulse() as pulse:
        began = time.monotonic()
        outcome = rig.runner.run(spec, run_dir, on_running=lambda: None, stop=StopRequest())
        took = time.monotonic() - began
    assert outcome.state in (RunState.FAILED, RunState.UPLOADING), outcome
    assert not _leftovers(rig, spec.run_id), "the run left containers or volumes"
    rig.node.reload()
    assert rig.node.status == "running", "the node's container did not survive the run"
    assert pulse.longest < 1.0, f"the agent's loop stalled {pulse.longest:.2f} s"
    assert not [p for p in run_dir.rglob("*") if p.is_symlink()]
    # The next run starts promptly and runs as it should.
    after = _spec("ok")
    started: list[float] = []
    t0 = time.monotonic()
    nxt = rig.runner.run(after, tmp_path / f"{mode}-next",
                         on_running=lambda: started.append(time.monotonic() - t0),
                         stop=StopRequest())
    assert nxt.state == RunState.UPLOADING, nxt.reason
    assert started and started[0] < NEXT_START_S, started
    meta = json.loads((run_dir / "meta" / "run.json").read_text())
    peak = meta["confinement"]["peak"]
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    with FIGURES.open("a") as f:
        f.write(json.dumps({
            "mode": mode, "state": str(outcome.state), "reason": outcome.reason,
            "took_s": round(took, 2), "exit_code": outcome.exit_code,
            "peak_memory_mb": round(peak.get("memory_bytes", 0) / 2**20, 1),
            "peak_pids": peak.get("pids"), "cpu_s": round(peak.get("cpu_s", 0), 2),
            "results_mb": round(peak.get("results_bytes", 0) / 2**20, 2),
            "result_files": peak.get("result_files"),
            "agent_longest_stall_s": round(pulse.longest, 3),
            "agent_rss_growth_mb": round(
                (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024, 1),
            "next_start_s": round(started[0], 2),
            "loadavg_1m": os.getloadavg()[0],
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }) + "\n")
    return Row(outcome, run_dir, took, meta)


def test_the_experiment_is_confined_as_the_engine_sees_it(rig: Rig) -> None:
    """Every capability dropped, no-new-privileges, the default seccomp profile, not
    privileged, a read-only root, the limits; results, /tmp and config on bounded tmpfs
    volumes in the holder's namespace; the holder confined too."""
    engine = DockerEngine(rig.client, node_id=NODE_ID)
    spec = replace(_spec("ok"), limits=replace(LIMITS, capabilities=("NET_RAW",)))
    try:
        holder = engine.create_holder(spec, HolderNeeds(f"container:{NODE_ID}"))
        container = engine.create(spec, holder)
        host = rig.client.api.inspect_container(container)["HostConfig"]
        assert host["CapDrop"] == ["ALL"] and host["CapAdd"] == ["NET_RAW"]
        assert host["SecurityOpt"] == ["no-new-privileges"]  # no seccomp=unconfined
        assert host["Privileged"] is False and host["ReadonlyRootfs"] is True
        holder_id = rig.client.api.inspect_container(holder.id)["Id"]
        assert host["NetworkMode"] == f"container:{holder_id}"
        assert host["Memory"] == host["MemorySwap"] == LIMITS.memory_limit_mb * 2**20
        assert host["NanoCpus"] == 500_000_000 and host["PidsLimit"] == 64
        mounts = {m["Target"]: m for m in host["Mounts"]}
        assert set(mounts) == {"/results", "/tmp", "/testbed"}
        assert mounts["/testbed"]["ReadOnly"] is True
        for m in mounts.values():
            volume = rig.client.volumes.get(m["Source"]).attrs
            assert volume["Options"]["type"] == "tmpfs"
        results = rig.client.volumes.get(mounts["/results"]["Source"]).attrs["Options"]["o"]
        assert results.startswith("size=8m,nr_inodes=501,")
        held = rig.client.api.inspect_container(holder.id)["HostConfig"]
        assert held["CapDrop"] == ["ALL"] and held["ReadonlyRootfs"] is True
        assert held["NetworkMode"] == f"container:{rig.node.id}"
    finally:
        engine.remove_leftovers()


def test_its_root_is_read_only_and_its_config_there(rig: Rig, tmp_path: Path) -> None:
    row = hostile_run(rig, tmp_path, "root")
    assert row.outcome.state == RunState.FAILED and row.outcome.exit_code == 3
    assert "Read-only file system" in (row.run_dir / "logs" / "stderr.txt").read_text()
    assert row.meta["confinement"]["capabilities"] == []
    assert row.meta["confinement"]["memory_limit_mb"] == LIMITS.memory_limit_mb


def test_row1_forks_without_end(rig: Rig, tmp_path: Path) -> None:
    row = hostile_run(rig, tmp_path, "fork")
    assert row.outcome.state == RunState.FAILED
    assert row.outcome.reason.startswith("reached its process limit of 64"), row.outcome
    assert row.took_s < 15


def test_row2_allocates_memory_without_end(rig: Rig, tmp_path: Path) -> None:
    row = hostile_run(rig, tmp_path, "memory")
    assert row.outcome.state == RunState.FAILED
    assert row.outcome.reason.startswith(
        f"out of memory: killed at its memory limit of {LIMITS.memory_limit_mb} MB"
    ), row.outcome
    assert row.took_s < 15


@pytest.mark.quiet  # its CPU time against its wall time
def test_row3_spins_on_every_core(rig: Rig, tmp_path: Path) -> None:
    row = hostile_run(rig, tmp_path, "spin", slot_s=6)
    assert row.outcome.state == RunState.FAILED
    assert row.outcome.reason.startswith("exceeded its time slot"), row.outcome
    assert row.took_s < 12
    # Half a core (cpus: 0.5) for at most its slot, whatever it asked of every core.
    assert row.meta["confinement"]["peak"]["cpu_s"] <= 0.5 * row.took_s + 0.5


def test_row4_fills_its_results(rig: Rig, tmp_path: Path) -> None:
    row = hostile_run(rig, tmp_path, "fill-results")
    assert row.outcome.state == RunState.FAILED
    assert row.outcome.reason.startswith("results over their bound of 8 MB"), row.outcome
    assert row.took_s < 15  # not its 30 s slot: the bound ended it
    stderr = (row.run_dir / "logs" / "stderr.txt").read_text()
    assert "No space left on device" in stderr
    # What it wrote within the bound is copied out, and no more.
    assert (row.run_dir / "results" / "fill.bin").stat().st_size <= 8 * 2**20


def test_row5_fills_its_tmp(rig: Rig, tmp_path: Path) -> None:
    row = hostile_run(rig, tmp_path, "fill-tmp")
    assert row.outcome.state == RunState.FAILED
    assert row.outcome.reason.startswith("/tmp over its bound of 8 MB"), row.outcome
    assert row.took_s < 15
    assert "No space left on device" in (row.run_dir / "logs" / "stderr.txt").read_text()


def test_row6_writes_a_million_small_result_files(rig: Rig, tmp_path: Path) -> None:
    row = hostile_run(rig, tmp_path, "files")
    assert row.outcome.state == RunState.FAILED
    assert row.outcome.reason.startswith("results over their bound of 500 files"), row.outcome
    assert row.took_s < 15
    assert len(list((row.run_dir / "results").iterdir())) == 500


def test_row10_ignores_sigterm_at_its_deadline(rig: Rig, tmp_path: Path) -> None:
    row = hostile_run(rig, tmp_path, "sigterm", slot_s=4)
    assert row.outcome.state == RunState.FAILED
    assert row.outcome.reason.startswith("exceeded its time slot"), row.outcome
    assert row.outcome.exit_code == 137  # SIGKILL: no grace to ignore
    assert row.took_s < 8


def test_row11_leaves_a_symlink_to_a_host_file(rig: Rig, tmp_path: Path) -> None:
    row = hostile_run(rig, tmp_path, "symlink")
    assert row.outcome.state == RunState.UPLOADING, row.outcome
    results = row.run_dir / "results"
    assert sorted(p.name for p in results.iterdir()) == ["ok.json"]
    note = (row.run_dir / "logs" / "agent.txt").read_text()
    assert "not copied (links or devices are not results)" in note
    contents = inspect_bundle(build_bundle(row.run_dir, run_id="r", node_id=NODE_ID))
    assert not [f.path for f in contents.files if "shadow" in f.path or "host-root" in f.path]


def test_row12_returns_a_compression_bomb(rig: Rig, tmp_path: Path) -> None:
    """Its result is about a megabyte that inflates to 256 MiB: the node copies and
    bundles the bytes as they are, never inflating them (the orchestrator's ingest
    bounds what it inflates: its own row)."""
    row = hostile_run(rig, tmp_path, "bomb")
    assert row.outcome.state == RunState.UPLOADING, row.outcome
    bomb = row.run_dir / "results" / "result.json.gz"
    assert 0 < bomb.stat().st_size < 2 * 2**20
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    data = build_bundle(row.run_dir, run_id="r", node_id=NODE_ID)
    assert len(data) < 4 * 2**20
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB


def test_a_holder_that_cannot_start_fails_the_run_and_leaves_nothing(
        rig: Rig, tmp_path: Path) -> None:
    runner = DockerRunner(rig.client, counters=rig.runner.counters, node_id=NODE_ID,
                          interfaces=["eth0"], holder_image="testbed/does-not-exist:0")
    spec = _spec("ok")
    outcome = runner.run(spec, tmp_path / "run", on_running=lambda: None, stop=StopRequest())
    assert outcome.state == RunState.FAILED
    assert outcome.reason.startswith("node could not start the run's holder container: ")
    assert not _leftovers(rig, spec.run_id)
    assert (tmp_path / "run" / "meta" / "run.json").exists()
