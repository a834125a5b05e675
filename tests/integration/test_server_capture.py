"""Both ends of a run's packet capture: the node's tcpdump and the measurement server's,
through the agent's runner into the run's bundle.

Real tcpdump, real iperf3, the real tat experiment and the real capture service
(server-image/capture_service.py) in network namespaces:

    server ns  s<TAG> 10.97.1.1 ---- "SIM" ---- n<TAG> 10.97.1.2  node ns (tat.py, tcpdump)
               k<TAG> 10.97.0.1 -- control -- r<TAG> 10.97.0.2    this process (the agent)

The agent reaches the capture service over the control link only, as in the compose
fleet, so fetching the server's capture neither crosses nor spends the SIM. The
container engine is one that runs the experiment as a process in the node's namespace
with the runner's own config.json (another implementation of the agent's
ContainerEngine): everything else is the agent's code.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from node_agent.config import CaptureConfig
from node_agent.confinement import BoundsUsage
from node_agent.engine import ContainerId, Ended, Holder, config_tar
from node_agent.interfaces import ProcNetDevCounters
from node_agent.runner import Runner, RunSpec, StopRequest
from orchestrator.analysis.flows import analyse_capture
from orchestrator.analysis.pcap import read_capture
from testbed_common.bundle import build_bundle, inspect_bundle
from testbed_common.states import RunState
from testbed_common.wire import Operator
from tests.conftest import REPO, require_root, require_tools

pytestmark = pytest.mark.netns

TAG = uuid.uuid4().hex[:6]
SERVER_NS, NODE_NS = f"tcs-{TAG}", f"tcn-{TAG}"
SIM_SERVER, SIM_NODE = f"s{TAG}", f"n{TAG}"
CTL_SERVER, CTL_HOST = f"k{TAG}", f"r{TAG}"
SERVER, NODE, CONTROL = "10.97.1.1", "10.97.1.2", "10.97.0.1"
SERVICE_PORT = 9010
KEEP_S = 3.0


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _in(ns: str, *cmd: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


@dataclass(frozen=True)
class Rig:
    url: str
    node_pid: int
    capture_dir: Path
    log: Path


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    require_root("network namespaces (ip netns)")
    require_tools("ip", "iperf3", "tcpdump")
    procs: list[subprocess.Popen[Any]] = []
    work = Path(tempfile.mkdtemp(prefix="tbcap-"))
    capture_dir, log = work / "captures", work / "service.log"
    try:
        for ns in (SERVER_NS, NODE_NS):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", SIM_SERVER, "netns", SERVER_NS, "type", "veth", "peer",
            "name", SIM_NODE, "netns", NODE_NS)
        _ip("link", "add", CTL_SERVER, "netns", SERVER_NS, "type", "veth", "peer",
            "name", CTL_HOST)
        for ns, dev, addr in ((SERVER_NS, SIM_SERVER, f"{SERVER}/24"),
                              (NODE_NS, SIM_NODE, f"{NODE}/24"),
                              (SERVER_NS, CTL_SERVER, f"{CONTROL}/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
        # a SIM's rate, so that a 3 s run is a few MB (a veth alone moves GB/s)
        _ip("-n", NODE_NS, "link", "set", SIM_NODE, "up")
        subprocess.run(_in(NODE_NS, "tc", "qdisc", "add", "dev", SIM_NODE, "root", "tbf",
                           "rate", "10mbit", "burst", "32kbit", "latency", "50ms"),
                       check=True, capture_output=True)
        _ip("addr", "add", "10.97.0.2/24", "dev", CTL_HOST)
        _ip("link", "set", CTL_HOST, "up")
        procs.append(subprocess.Popen(  # as the measurement server runs it
            _in(SERVER_NS, "iperf3", "-s", "-p", "5201", "-J", "-i", "0.1"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with log.open("w") as err:
            service = subprocess.Popen(
                _in(SERVER_NS, sys.executable, str(REPO / "server-image/capture_service.py"),
                    "--dir", str(capture_dir), "--listen", CONTROL,
                    "--port", str(SERVICE_PORT), "--max-captures", "2",
                    "--keep-s", str(KEEP_S), "--min-free-bytes", "0"),
                env={**os.environ, "PYTHONPATH": str(REPO / "common")},
                stdout=subprocess.DEVNULL, stderr=err)
        procs.append(service)
        holder = subprocess.Popen(_in(NODE_NS, "sleep", "infinity"))  # the node's netns
        procs.append(holder)
        url = f"http://{CONTROL}:{SERVICE_PORT}"
        deadline = time.monotonic() + 10
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert service.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the capture service did not come up"
            time.sleep(0.1)
        yield Rig(url, holder.pid, capture_dir, log)
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        subprocess.run(["ip", "link", "del", CTL_HOST], capture_output=True)
        for ns in (SERVER_NS, NODE_NS):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


class ProcessEngine:
    """A :class:`~node_agent.engine.ContainerEngine` that runs the experiment as a
    process in the node's netns: it gets the config.json the engine is given, and
    /results is a folder. One container at a time."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.environment: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None

    def remove_leftovers(self) -> list[str]:
        return []

    def ensure_image(self, image: str) -> str:
        return "sha256:tat"

    def create_holder(self, spec: RunSpec, needs: Any) -> Holder:
        return Holder(ContainerId("h"), pid=1, sandbox_key=None)

    def create(self, spec: RunSpec, holder: Holder) -> ContainerId:
        with tarfile.open(fileobj=io.BytesIO(config_tar(spec.config_json()))) as tar:
            tar.extractall(self.work / "testbed", filter="data")
        (self.work / "results").mkdir(exist_ok=True)
        self.environment = spec.environment()
        return ContainerId(spec.run_id)

    def start(self, container: ContainerId) -> None:
        env = {**os.environ, **self.environment,
               "TESTBED_CONFIG": str(self.work / "testbed/config.json"),
               "TESTBED_RESULTS": str(self.work / "results"),
               "PYTHONPATH": str(REPO / "common")}  # the experiment kit, as in the image
        with (self.work / "stdout").open("wb") as out, (self.work / "stderr").open("wb") as err:
            self.proc = subprocess.Popen(
                _in(NODE_NS, sys.executable, str(REPO / "experiments/tat/tat.py")), env=env,
                stdout=out, stderr=err)

    def running(self, container: ContainerId) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def await_end(self, container: ContainerId, *, within_s: float) -> None:
        assert self.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=within_s)

    def kill(self, container: ContainerId) -> bool:
        if self.proc is not None:
            self.proc.kill()
        return True

    def wait(self, container: ContainerId, *, timeout_s: float) -> Ended:
        assert self.proc is not None
        return Ended(self.proc.wait(timeout=timeout_s))

    def usage(self, holder: Holder, container: ContainerId | None) -> BoundsUsage:
        return BoundsUsage()

    def remove_holder(self, spec: RunSpec) -> None:
        pass

    def collect(self, container: ContainerId, holder: Holder, run_dir: Path) -> str:
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        for name in ("stdout", "stderr"):
            (run_dir / "logs" / f"{name}.txt").write_bytes((self.work / name).read_bytes())
        shutil.copytree(self.work / "results", run_dir / "results", dirs_exist_ok=True)
        return (self.work / "stderr").read_text(errors="replace")

    def remove(self, container: ContainerId) -> None:
        pass


def _spec(url: str | None, *, duration_s: float = 3) -> RunSpec:
    return RunSpec(
        run_id=f"tbcap-{uuid.uuid4().hex[:8]}", experiment="tat", image="testbed/exp-tat:1",
        node_id="tbcap", netns_container="tbcap", interface=SIM_NODE, interface_address=NODE,
        operator=Operator(mcc_mnc="240-01", name="Telia"), server_address=SERVER,
        parameters={"duration_s": duration_s, "direction": "uplink", "bin_s": 0.1},
        deadline=datetime.now(UTC) + timedelta(seconds=60), max_bytes=10**9,
        server_capture_url=url,
    )


def _run(rig: Rig, spec: RunSpec, tmp_path: Path) -> tuple[Any, Path]:
    work = tmp_path / "container"
    work.mkdir()
    runner = Runner(
        ProcessEngine(work), counters=ProcNetDevCounters(lambda: rig.node_pid),
        interfaces=[SIM_NODE], capture=CaptureConfig(), capture_netns_pid=lambda: rig.node_pid,
    )
    run_dir = tmp_path / "run"
    outcome = runner.run(spec, run_dir, on_running=lambda: None, stop=StopRequest())
    return outcome, run_dir


def test_the_servers_capture_of_a_tat_run_is_in_its_bundle(rig: Rig, tmp_path: Path) -> None:
    outcome, run_dir = _run(rig, _spec(rig.url), tmp_path)
    assert outcome.state == RunState.UPLOADING, (outcome, rig.log.read_text())
    tat = json.loads((run_dir / "results" / "tat.json").read_text())

    meta = json.loads((run_dir / "meta" / "server-capture.json").read_text())
    member = f"server/capture/{SIM_NODE}.pcap"
    assert meta["error"] is None and meta["file"] == member, meta
    server = meta["server"]
    # tcpdump on the server interface that routes to the node, for the node alone
    assert server["interface"] == SIM_SERVER and server["filter"] == f"host {NODE}"
    assert server["ended_by"] == "request" and not server["time_capped"]
    assert server["stats"]["packets_captured"] > 100
    assert server["stats"]["packets_dropped_by_kernel"] == 0

    # In the bundle, checksummed, byte for byte what the server captured
    data = build_bundle(run_dir, run_id="r", node_id="tbcap")
    listed = {f.path: f for f in inspect_bundle(data).files}
    assert listed[member].sha256 == meta["sha256"] == server["sha256"]
    assert {"meta/server-capture.json", f"results/capture/{SIM_NODE}.pcap"} <= set(listed)
    assert not member.startswith("results/")  # ingest reads the node's capture only
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        pcap = tar.extractfile(member)
        assert pcap is not None
        pcap_bytes = pcap.read()
    assert len(pcap_bytes) == server["bytes"] == meta["bytes"]

    capture = read_capture(pcap_bytes)
    assert capture.snaplen == 96 and capture.damage is None
    flows = [f for f in analyse_capture(capture.packets)
             if f.data_from_client and f.connection.server.port == tat["port"]]
    assert flows, "no uplink TCP flow to the run's iperf3 port in the server's capture"
    flow = flows[0]
    assert str(ipaddress.ip_address(flow.connection.client.addr)) == NODE
    # the server saw every byte iperf3 received, and the handshake
    print(f"server capture: {flow.delivered_bytes} B delivered; tat: {tat['bytes']} B")
    assert flow.rtt_3whs_s is not None
    assert abs(flow.delivered_bytes - tat["bytes"]) <= 0.01 * tat["bytes"]
    # only the node's packets: the control link's fetch is not in it
    ports = {p for f in analyse_capture(capture.packets)
             for p in (f.connection.server.port, f.connection.client.port)}
    assert SERVICE_PORT not in ports

    # fetched, then deleted on the server
    assert httpx.get(f"{rig.url}/captures/{server['id']}", timeout=5).status_code == 404
    assert not list(rig.capture_dir.glob("*.pcap"))


def test_a_server_capture_that_fails_never_fails_the_run(rig: Rig, tmp_path: Path) -> None:
    outcome, run_dir = _run(rig, _spec(f"http://{CONTROL}:9", duration_s=1), tmp_path)
    assert outcome.state == RunState.UPLOADING, outcome
    meta = json.loads((run_dir / "meta" / "server-capture.json").read_text())
    assert meta["enabled"] and meta["file"] is None
    assert "cannot reach the server's capture service" in meta["error"]
    assert "server packet capture: cannot reach" in (run_dir / "logs/agent.txt").read_text()
    assert not (run_dir / "server").exists()
    assert (run_dir / "results" / "tat.json").exists()


def test_the_server_bounds_what_a_vanished_agent_leaves(rig: Rig) -> None:
    """Two captures (the rig's --max-captures) started and never stopped: a third is
    refused with 503 and Retry-After; both end at their max_s and are deleted --keep-s
    after that."""
    started = []
    for _ in range(2):
        r = httpx.post(f"{rig.url}/captures", json={"address": NODE, "max_s": 1}, timeout=10)
        assert r.status_code == 201, r.text
        started.append(r.json()["id"])
    r = httpx.post(f"{rig.url}/captures", json={"address": NODE}, timeout=10)
    assert r.status_code == 503 and r.headers["Retry-After"] and "--max-captures" in r.text
    time.sleep(2)
    for cid in started:
        doc = httpx.get(f"{rig.url}/captures/{cid}", timeout=5).json()
        assert not doc["running"] and doc["time_capped"] and doc["ended_by"] == "max_s", doc
    time.sleep(KEEP_S + 1)
    for cid in started:
        r = httpx.get(f"{rig.url}/captures/{cid}", timeout=5)
        assert r.status_code == 404 and "POST /captures" in r.json()["error"]
    assert not list(rig.capture_dir.glob("*.pcap"))
