"""A confined run's network (node_agent.runnet) on a real node: the hostile-experiment
matrix's rows 7 (sends on a SIM it did not book), 8 (connects to what it must not) and
9 (spoofs another interface's address), the metadata endpoint, a multi-homed booking,
the kernel quota on forwarded traffic, a TAT's rate confined against shared, and the
agent's own run path with ``run_network: confined``.

The node is the compose fleet's in small (tests/integration/runnet_rig.py: the fleet's
node-links.sh, two SIMs behind linkem, a server, the platform's stand-ins). The test
process plays the agent: it runs :class:`~node_agent.runnet.ConfinedNetwork` against the
node's namespace (``node_netns``), starts each run's holder container (network "none",
the holder's command and NET_ADMIN only: the smallest holder the seam asks for) and an
experiment container that joins it with NET_RAW and nothing else, as a hostile
experiment would be given.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import docker
import pytest

from node_agent.backstop import NftBackstop
from node_agent.runner import LABEL_RUN, DockerRunner, RunSpec, StopRequest
from node_agent.runnet import (
    RunNetworkView,
    SharedNetwork,
)
from testbed_common.states import RunState
from testbed_common.wire import Operator
from tests.conftest import REPO, require_docker, require_root, require_tools
from tests.integration.runnet_rig import (
    AGENT_PORT,
    ANSWER_PORT,
    CONTROL,
    IMAGE,
    METADATA_PORT,
    NODE,
    OP_B,
    OTHER_NODE,
    PLATFORM,
    PROBE,
    QUOTA_IPERF_PORT,
    SERVER,
    SUFFIX,
    TAT_IMAGE,
    UDP_PORT,
    Node,
    confined,
    fleet_node,
    sh,
    start_holder,
)

pytestmark = [pytest.mark.docker, pytest.mark.netns]


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    require_root("network namespaces and nftables in the node's namespace")
    require_docker("a confined run's network")
    require_tools("nsenter", "ip", "nft")
    with fleet_node() as n:
        yield n


@dataclass
class Run:
    holder: str
    experiment: str
    view: RunNetworkView
    probe: subprocess.Popen[str]

    def ask(self, kind: str, *args: Any) -> str:
        assert self.probe.stdin is not None and self.probe.stdout is not None
        self.probe.stdin.write(json.dumps([kind, list(args)]) + "\n")
        self.probe.stdin.flush()
        return str(json.loads(self.probe.stdout.readline()))

    def exec(self, *cmd: str) -> str:
        return sh("docker", "exec", self.experiment, *cmd)


@pytest.fixture
def run_on(node: Node) -> Iterator[Any]:
    started: list[tuple[str, str, Any, str]] = []
    probes: list[subprocess.Popen[str]] = []

    def start(booked: Sequence[str], network: Any = None) -> Run:
        network = network or confined(node)
        run_id = f"r-{uuid.uuid4().hex[:6]}"
        holder, experiment = f"tbtest-rn-holder-{run_id}", f"tbtest-rn-run-{run_id}"
        started.append((holder, experiment, network, run_id))
        pid, sandbox = start_holder(holder, network.holder_needs(run_id, booked))
        view = network.attach(run_id, holder_pid=pid, sandbox_key=sandbox, booked=booked)
        # A hostile experiment as it would be started: NET_RAW and nothing else.
        sh("docker", "run", "-d", "--name", experiment, "--network", f"container:{holder}",
           "--cap-drop", "ALL", "--cap-add", "NET_RAW", "--entrypoint", "sleep", IMAGE,
           "infinity")
        probe = subprocess.Popen(["docker", "exec", "-i", experiment, "python3", "-c", PROBE],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        probes.append(probe)
        return Run(holder, experiment, view, probe)

    yield start
    for probe in probes:
        probe.kill()
        probe.communicate()
    for holder, experiment, network, run_id in started:
        sh("docker", "rm", "-f", experiment, check=False)
        network.detach(run_id)
        sh("docker", "rm", "-f", holder, check=False)


def udp_log(node: Node) -> list[str]:
    out = sh("docker", "exec", node.server, "sh", "-c", "cat /tmp/udp.log 2>/dev/null",
             check=False)
    return out.splitlines()


def test_a_run_sees_its_booked_interface_and_loopback_only(node: Node, run_on: Any) -> None:
    run = run_on(["op0"])
    links = run.exec("ip", "-o", "link", "show")
    assert sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines()) \
        == ["lo", "op0"], links
    assert run.view.addresses == {"op0": "198.18.0.2"}
    assert run.ask("tcp", SERVER["op0"], ANSWER_PORT, "198.18.0.2") \
        == f"connected: reached server:{ANSWER_PORT}"
    # it measures with the node's TCP settings (the fleet's: no metrics cached per flow)
    assert run.exec("cat", "/proc/sys/net/ipv4/tcp_no_metrics_save").strip() == "1"


def test_row7_a_run_on_op0_moves_nothing_on_op1(node: Node, run_on: Any) -> None:
    """Matrix row 7: booked on op0 of a two-SIM node, it binds op1's address, binds to
    op1 by name, sends to op1's server (TCP and a thousand UDP datagrams) and puts raw
    packets with op1's address on the wire: op1's counters do not move."""
    run = run_on(["op0"])
    before = node.snapshot()
    tried = {
        "bind op1's address": run.ask("tcp", SERVER["op1"], ANSWER_PORT, NODE["op1"]),
        "bind to op1 by name": run.ask("tcp", SERVER["op1"], ANSWER_PORT, None, "op1"),
        "connect to op1's server": run.ask("tcp", SERVER["op1"], ANSWER_PORT),
        "UDP to op1's server": run.ask("udp", SERVER["op1"], UDP_PORT, 1000),
        "raw, op1's address": run.ask("spoof", NODE["op1"], SERVER["op1"], UDP_PORT, 200),
    }
    time.sleep(1.0)  # linkem's queue and delay: whatever was let through has left
    moved = node.moved(before)
    assert moved["op1"][0] == 0, (moved, tried)
    assert all(not r.startswith("connected") for r in tried.values()), tried
    assert not [line for line in udp_log(node) if line.startswith(OP_B)], udp_log(node)


def test_row8_a_run_reaches_nothing_of_the_platform(node: Node, run_on: Any) -> None:
    """Matrix row 8: the orchestrator, PostgreSQL and InfluxDB (control network), the
    agent (any address of the node but the metadata port), another node, link-local
    and the engine's socket; the same connections from the node's own namespace (the
    shared path) succeed, so the refusals are the confinement's."""
    sh("docker", "exec", "-d", node.name, "python3", "-m", "http.server", str(AGENT_PORT))
    targets = {
        "orchestrator": (PLATFORM, 8080), "PostgreSQL": (PLATFORM, 5432),
        "InfluxDB": (PLATFORM, 8086), "another node": (OTHER_NODE, ANSWER_PORT),
        "agent on the run's gateway": ("198.18.0.1", AGENT_PORT),
        "agent on the control address": (NODE["control"], AGENT_PORT),
        "agent on the SIM address": (NODE["op0"], AGENT_PORT),
        "link-local metadata": ("169.254.169.254", 80),
    }
    shared = {what: sh("nsenter", f"--net={node.netns}", sys.executable, "-c",
                       f"import socket; socket.create_connection({addr!r}, timeout=2); "
                       "print('ok')", check=False).strip()
              for what, addr in targets.items() if what != "link-local metadata"
              and addr[0] != "198.18.0.1"}
    assert set(shared.values()) == {"ok"}, shared
    run = run_on(["op0"])
    reached = {what: run.ask("tcp", host, port) for what, (host, port) in targets.items()}
    assert all(r.startswith("refused") for r in reached.values()), reached
    assert "No such file" in sh("docker", "exec", run.experiment, "sh", "-c",
                                "ls /var/run/docker.sock 2>&1", check=False)


def test_row9_spoofed_sources_get_nothing_out(node: Node, run_on: Any) -> None:
    """Matrix row 9: raw packets with op0's own SIM address, op1's and the node's
    control address reach nobody; the same packet from the run's own address does."""
    run = run_on(["op0"])
    mark = len(udp_log(node))
    for source in (NODE["op0"], NODE["op1"], NODE["control"], "198.18.1.2"):
        assert run.ask("spoof", source, SERVER["op0"], UDP_PORT, 20) == "sent"
    time.sleep(1.0)
    assert udp_log(node)[mark:] == []
    assert run.ask("spoof", "198.18.0.2", SERVER["op0"], UDP_PORT, 1) == "sent"
    for _ in range(30):
        if udp_log(node)[mark:]:
            break
        time.sleep(0.1)
    # it arrives from op0's SIM address (source NAT), the only address the run has
    assert [line.split()[0] for line in udp_log(node)[mark:]] == [NODE["op0"]]


def test_the_metadata_endpoint_answers_get_and_refuses_writes(node: Node,
                                                              run_on: Any) -> None:
    run = run_on(["op0"])
    url = run.view.metadata_url
    assert url == f"http://198.18.0.1:{METADATA_PORT}"
    assert run.ask("http", "GET", url + "/modem").startswith("200")
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert run.ask("http", method, url + "/modem").startswith("405"), method


def test_a_multi_homed_run_reaches_the_server_on_both(node: Node, run_on: Any) -> None:
    run = run_on(["op0", "op1"])
    assert run.view.addresses == {"op0": "198.18.0.2", "op1": "198.18.1.2"}
    before = node.snapshot()
    for sim, address in run.view.addresses.items():
        assert run.ask("tcp", SERVER[sim], ANSWER_PORT, address) \
            == f"connected: reached server:{ANSWER_PORT}", sim
    assert run.ask("tcp", SERVER["op1"], ANSWER_PORT, None, "op1").startswith("connected")
    moved = node.moved(before)
    assert moved["op0"][0] > 0 and moved["op1"][0] > 0, moved


def test_the_kernel_quota_counts_a_confined_run(node: Node, run_on: Any) -> None:
    """The backstop charges the run's forwarded packets: a run with a 1 MB quota that
    sends 4 MB is stopped by the kernel near 1 MB (op0's counters)."""
    backstop = NftBackstop(netns_pid=lambda: node.pid)
    run = run_on(["op0"])
    run_id = "quota-" + uuid.uuid4().hex[:6]
    backstop.arm(run_id, interface="op0", address=NODE["op0"], limit_bytes=1_000_000)
    try:
        before = node.snapshot()
        sh("docker", "exec", run.experiment, "timeout", "10", "iperf3", "-c",
           SERVER["op0"], "-p", str(QUOTA_IPERF_PORT), "-B", "198.18.0.2", "-n", "4M",
           check=False)
        state = backstop.state(run_id)
        tx, rx = node.moved(before)["op0"]
    finally:
        backstop.disarm(run_id)
    assert state.spent, state
    assert tx + rx < 1_400_000, (tx, rx, state)   # its 1 MB and what was in flight
    assert tx > 500_000, (tx, rx)                 # it counted the run, not nothing


def iperf_rate(where: list[str], bind: str) -> float:
    out = sh(*where, "iperf3", "-c", SERVER["op0"], "-B", bind, "-t", "6", "-O", "2", "-J")
    doc = json.loads(out)
    assert "error" not in doc, doc["error"]
    return float(doc["end"]["sum_received"]["bits_per_second"])


@pytest.mark.quiet
def test_a_tat_through_the_confined_path_keeps_the_links_rate(node: Node,
                                                              run_on: Any) -> None:
    """The same emulated link (10 Mbit/s, Telia's fleet profile), iperf3 uplink for 6 s:
    from a confined run and from the node's own namespace (the shared path)."""
    shared_net = SharedNetwork(netns_container=node.name, address_of=NODE.get)
    assert shared_net.holder_needs("r", ["op0"]).network_mode == f"container:{node.name}"
    shared = iperf_rate(["docker", "exec", node.name], NODE["op0"])
    run = run_on(["op0"])
    confined_rate = iperf_rate(["docker", "exec", run.experiment], "198.18.0.2")
    assert shared > 8e6, shared
    assert abs(confined_rate - shared) / shared < 0.10, (confined_rate, shared)


@pytest.mark.quiet  # asserts a TAT's rate
def test_the_agent_runs_a_tat_confined(node: Node, tmp_path: Path) -> None:
    """The agent's own run path with ``run_network: confined``: DockerRunner starts the
    holder (DockerEngine.create_holder), attaches the network, runs the real tat
    experiment in it with the kernel quota armed; the experiment was told its address
    inside the run, its TAT is the link's, op1 moved nothing, and nothing of the run is
    left."""
    client = docker.from_env()
    if not client.images.list(name=TAT_IMAGE):
        sh(str(REPO / "scripts" / "build-images.sh"), "tat")
    network = confined(node)
    runner = DockerRunner(
        client, counters=node.counters, node_id=f"tbtest-rn-{SUFFIX}",
        interfaces=["op0", "op1"], network=network, holder_image=IMAGE,
        backstop=NftBackstop(netns_pid=lambda: node.pid),
    )
    spec = RunSpec(
        run_id=f"tbtest-rn-{uuid.uuid4().hex[:8]}", experiment="tat", image=TAT_IMAGE,
        node_id=f"tbtest-rn-{SUFFIX}", netns_container=node.name, interface="op0",
        interface_address=NODE["op0"], operator=Operator(mcc_mnc="240-01", name="Telia"),
        server_address=SERVER["op0"],
        parameters={"duration_s": 5, "direction": "uplink", "bin_s": 0.1},
        deadline=datetime.now(UTC) + timedelta(seconds=60), max_bytes=30_000_000,
        metadata_url=f"http://127.0.0.1:{METADATA_PORT}")
    try:
        outcome = runner.run(spec, tmp_path / "run", on_running=lambda: None,
                             stop=StopRequest())
        assert outcome.state == RunState.UPLOADING, outcome.reason
        iperf = json.loads((tmp_path / "run" / "results" / "iperf3.json").read_text())
        assert iperf["start"]["connected"][0]["local_host"] == "198.18.0.2"
        tat = json.loads((tmp_path / "run" / "results" / "tat.json").read_text())
        assert 8.5e6 < tat["mean_bps"] < 10.2e6, tat["mean_bps"]
        meta = json.loads((tmp_path / "run" / "meta" / "run.json").read_text())
        before, after = meta["counters_before"], meta["counters_after"]
        assert after["op1"]["tx_bytes"] == before["op1"]["tx_bytes"], (before, after)
        assert outcome.bytes_used >= tat["bytes"]
        left = client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={spec.run_id}"})
        assert left == []
        assert "tbrun0" not in sh("nsenter", f"--net={node.netns}", "ip", "-o", "link")
    finally:
        client.close()


def test_a_run_does_not_reach_the_engines_host(node: Node, run_on: Any) -> None:
    """Beyond the matrix's rows: on an emulated fleet the machine that runs the engine has
    an address on each of the node's networks (each bridge's gateway), the operator
    networks' included, which a run's traffic can reach; a node denies them as the compose
    fleet does (its whole address range, 172.30.0.0/16 there, but the runs' servers). Then
    none is reachable from a run though each is from the node."""
    listener = subprocess.Popen([sys.executable, "-c", (
        "import socket\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        f"s.bind(('0.0.0.0', {AGENT_PORT + 1})); s.listen(16)\n"
        "while True:\n"
        "    c, _ = s.accept(); c.sendall(b'host'); c.close()\n")])
    try:
        # the host's own address on each network the node is on (each bridge's gateway)
        gateways = set(sh("docker", "inspect", "-f",
                          "{{range .NetworkSettings.Networks}}{{.Gateway}} {{end}}",
                          node.name).split())
        assert gateways, "the node is on no network with a gateway"
        time.sleep(0.3)
        for gw in sorted(gateways):
            assert sh("nsenter", f"--net={node.netns}", sys.executable, "-c",
                      f"import socket; print(socket.create_connection(({gw!r}, "
                      f"{AGENT_PORT + 1}), timeout=2).recv(4).decode())").strip() == "host"
        fleet_range = CONTROL.rsplit(".", 1)[0] + ".0.0/16"
        run = run_on(["op0"], confined(node, denied=(fleet_range,)))
        reached = {gw: run.ask("tcp", gw, AGENT_PORT + 1) for gw in sorted(gateways)}
        # the run's server, inside the denied range, stays reachable
        assert run.ask("tcp", SERVER["op0"], ANSWER_PORT, "198.18.0.2") \
            == f"connected: reached server:{ANSWER_PORT}"
        assert all(r.startswith("refused") for r in reached.values()), reached
    finally:
        listener.kill()
        listener.wait()


def test_nothing_of_the_node_answers_a_run_over_ipv6(node: Node, run_on: Any) -> None:
    """Beyond the matrix's rows: the run's namespace has an IPv6 stack of its own; a
    listener on every IPv6 address of the node is not reached from it over the run's
    link (the node drops all but IPv4 from a run), whether or not the link has IPv6."""
    run = run_on(["op0"])
    port = AGENT_PORT + 2
    node_ll = [line.split()[3].split("/")[0] for line in sh(
        "nsenter", f"--net={node.netns}", "ip", "-6", "-o", "addr", "show", "dev", "tbrun0",
        check=False).splitlines() if "scope link" in line]
    listener = subprocess.Popen(["nsenter", f"--net={node.netns}", sys.executable, "-c", (
        "import socket\n"
        "s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, "
        "socket.SO_REUSEADDR, 1)\n"
        f"s.bind(('::', {port})); s.listen(16)\n"
        "while True:\n"
        "    c, _ = s.accept(); c.sendall(b'node'); c.close()\n")])
    try:
        time.sleep(0.3)
        tried = run.exec("python3", "-c", (
            "import socket\n"
            f"targets = {[*node_ll, 'fe80::1']!r}\n"
            "out = []\n"
            "for dst in targets:\n"
            "    s = socket.socket(socket.AF_INET6); s.settimeout(2)\n"
            "    try:\n"
            f"        s.connect((dst, {port}, 0, socket.if_nametoindex('op0')))\n"
            "        out.append('connected:' + s.recv(4).decode())\n"
            "    except OSError as e: out.append('refused')\n"
            "print(' '.join(out))\n"))
    finally:
        listener.kill()
        listener.wait()
    assert "connected" not in tried, (node_ll, tried)
