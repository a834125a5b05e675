"""A confined run's network (node_agent.runnet) on a real node: the hostile-experiment
matrix's rows 7 (sends on a SIM it did not book), 8 (connects to what it must not) and
9 (spoofs another interface's address), the metadata endpoint, a multi-homed booking,
the kernel quota on forwarded traffic, and a TAT's rate confined against shared.

Topology (named tbtest-rn-*, removed afterwards), the compose fleet's in small: three
bridge networks (control 10.231.0.0/24; operators A 10.231.1.0/24 and B
10.231.2.0/24); a node container from the node image running the fleet's own
deploy/emulation/node-links.sh (two SIMs, op0 and op1, each behind its linkem with the
fleet's Telia and Tele2 profiles); a measurement server at .10 on both operator
networks (iperf3, a TCP answerer, a UDP recorder); and "the rest of the platform" on
the control network at .4 (stand-ins answering on the orchestrator's, PostgreSQL's and
InfluxDB's ports) and on operator A at .22 (another node). The test process plays the
agent: it runs :class:`~node_agent.runnet.ConfinedNetwork` against the node's
namespace (``node_netns``), starts each run's holder container (network "none", the
holder's command and NET_ADMIN only: the smallest holder the seam asks for) and an
experiment container that joins it with NET_RAW and nothing else, as a hostile
experiment would be given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from node_agent.backstop import NftBackstop
from node_agent.interfaces import Counters, ProcNetDevCounters
from node_agent.runnet import (
    ConfinedNetwork,
    HolderNeeds,
    RunNetworkView,
    SharedNetwork,
    SimRoute,
)
from tests.conftest import REPO, require_docker, require_root, require_tools

pytestmark = [pytest.mark.docker, pytest.mark.netns]

IMAGE = "testbed/node:dev"
SUFFIX = f"{os.getpid()}-{uuid.uuid4().hex[:4]}"
NET = "10.231"
CONTROL, OP_A, OP_B = f"{NET}.0", f"{NET}.1", f"{NET}.2"
NODE = {"control": f"{CONTROL}.21", "op0": f"{OP_A}.21", "op1": f"{OP_B}.21"}
SERVER = {"op0": f"{OP_A}.10", "op1": f"{OP_B}.10"}
PLATFORM = f"{CONTROL}.4"      # orchestrator, PostgreSQL, InfluxDB stand-ins
OTHER_NODE = f"{OP_A}.22"
METADATA_PORT = 8765
AGENT_PORT = 9999              # a stand-in for any other listener of the node's
ANSWER_PORT = 7000             # TCP: answers "reached <who>"
UDP_PORT = 7001                # UDP: the server counts what arrives
#: The answerer of every stand-in: TCP ports answer their name, UDP 7001 counts.
ANSWERER = r"""
import socket, sys, threading
who = sys.argv[1]
def tcp(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(64)
    while True:
        c, _ = s.accept(); c.sendall(f"reached {who}:{port}".encode()); c.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 7001))
    while True:
        data, peer = s.recvfrom(2048)
        open("/tmp/udp.log", "a").write(f"{peer[0]} {data[:40]!r}\n")
for p in map(int, sys.argv[2:]):
    threading.Thread(target=tcp, args=(p,), daemon=True).start()
udp()
"""
#: What a hostile experiment tries, one probe per line of JSON in, one result out.
PROBE = r"""
import json, socket, sys, struct
def tcp(host, port, bind=None, device=None):
    s = socket.socket(); s.settimeout(2)
    try:
        if device: s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, device.encode())
        if bind: s.bind((bind, 0))
        s.connect((host, port)); return "connected: " + s.recv(100).decode()
    except OSError as e: return f"refused: {e}"
    finally: s.close()
def udp(host, port, count, bind=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        if bind: s.bind((bind, 0))
        for _ in range(count): s.sendto(b"x" * 1000, (host, port))
        return "sent"
    except OSError as e: return f"refused: {e}"
def csum(b):
    if len(b) % 2: b += b"\0"
    t = sum(struct.unpack(f"!{len(b)//2}H", b)); t = (t >> 16) + (t & 0xffff); t += t >> 16
    return ~t & 0xffff
def spoof(src, dst, port, count):
    # a raw IPv4/UDP packet with a source address of someone else's (needs NET_RAW)
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    except OSError as e: return f"refused: {e}"
    payload = b"spoofed"
    udp_h = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0)
    ip_h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp_h) + len(payload), 1, 0, 64,
                       17, 0, socket.inet_aton(src), socket.inet_aton(dst))
    ip_h = ip_h[:10] + struct.pack("!H", csum(ip_h)) + ip_h[12:]
    try:
        for _ in range(count): s.sendto(ip_h + udp_h + payload, (dst, 0))
        return "sent"
    except OSError as e: return f"refused: {e}"
def http(method, url):
    import urllib.request
    req = urllib.request.Request(url, method=method, data=b"{}" if method != "GET" else None)
    try:
        with urllib.request.urlopen(req, timeout=3) as r: return f"{r.status} {r.read()[:200]!r}"
    except urllib.error.HTTPError as e: return f"{e.code} {e.read()[:200]!r}"
    except OSError as e: return f"refused: {e}"
for line in sys.stdin:
    kind, args = json.loads(line)
    print(json.dumps(globals()[kind](*args)), flush=True)
"""


def sh(*cmd: str, check: bool = True, stdin: str | None = None) -> str:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, input=stdin,
                          timeout=120, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: {proc.returncode}: {proc.stderr[-1500:]}")
    return proc.stdout


def inspect(name: str, fmt: str) -> str:
    return sh("docker", "inspect", "-f", fmt, name).strip()


@dataclass
class Node:
    name: str
    pid: int
    netns: str
    server: str
    counters: ProcNetDevCounters

    def moved(self, before: dict[str, Counters]) -> dict[str, tuple[int, int]]:
        """(tx, rx) bytes each SIM moved since ``before``."""
        out = {}
        for sim, c in before.items():
            now = self.counters.read(sim)
            out[sim] = (now.tx_bytes - c.tx_bytes, now.rx_bytes - c.rx_bytes)
        return out

    def snapshot(self) -> dict[str, Counters]:
        return {sim: self.counters.read(sim) for sim in ("op0", "op1")}


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    require_root("network namespaces and nftables in the node's namespace")
    require_docker("a confined run's network")
    require_tools("nsenter", "ip", "nft")
    if not sh("docker", "images", "-q", IMAGE).strip():
        sh(str(REPO / "scripts" / "build-images.sh"), "node")
    nets = {"control": f"tbtest-rn-ctl-{SUFFIX}", "op0": f"tbtest-rn-a-{SUFFIX}",
            "op1": f"tbtest-rn-b-{SUFFIX}"}
    subnets = {"control": CONTROL, "op0": OP_A, "op1": OP_B}
    names = {k: f"tbtest-rn-{k}-{SUFFIX}" for k in ("node", "server", "platform")}
    try:
        for key, net in nets.items():
            sh("docker", "network", "create", "--subnet", f"{subnets[key]}.0/24",
               "-o", "com.docker.network.bridge.enable_ip_masquerade=false", net)

        def container(name: str, first: tuple[str, str], more: Sequence[tuple[str, str]],
                      *args: str) -> None:
            sh("docker", "create", "--name", name, "--network", first[0], "--ip", first[1],
               *args)
            for net, ip in more:
                sh("docker", "network", "connect", "--ip", ip, net, name)
            sh("docker", "start", name)

        answer = ["--entrypoint", "python3", IMAGE, "-c", ANSWERER]
        container(names["server"], (nets["op0"], SERVER["op0"]),
                  [(nets["op1"], SERVER["op1"])], *answer, "server", str(ANSWER_PORT))
        sh("docker", "exec", "-d", names["server"], "iperf3", "-s")
        container(names["platform"], (nets["control"], PLATFORM),
                  [(nets["op0"], OTHER_NODE)], *answer, "platform",
                  str(ANSWER_PORT), "8080", "5432", "8086")
        links = (f"op0={OP_A}.0/24=/profiles/se-telia-fleet.yaml "
                 f"op1={OP_B}.0/24=/profiles/se-tele2-fleet.yaml")
        container(
            names["node"], (nets["control"], NODE["control"]),
            [(nets["op0"], NODE["op0"]), (nets["op1"], NODE["op1"])],
            "--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW",
            "--device", "/dev/net/tun:/dev/net/tun", "--tmpfs", "/run/linkem",
            "--sysctl", "net.ipv4.ip_forward=1",
            "--sysctl", "net.ipv4.conf.all.rp_filter=0",
            "--sysctl", "net.ipv4.conf.default.rp_filter=0",
            "--sysctl", "net.ipv4.conf.default.accept_local=1",
            "--sysctl", "net.ipv6.conf.all.disable_ipv6=1",
            "-v", f"{REPO / 'deploy/emulation'}:/emulation:ro",
            "-v", f"{REPO / 'deploy/profiles'}:/profiles:ro",
            "-e", f"TESTBED_LINKS={links}",
            "--entrypoint", "/emulation/node-links.sh", IMAGE, "sleep", "infinity")
        for _ in range(100):
            if "present" in sh("docker", "exec", names["node"], "sh", "-c",
                               "test -s /run/linkem/op1.json && echo present", check=False):
                break
            time.sleep(0.1)
        else:
            raise AssertionError("node-links.sh did not start both links: "
                                 + sh("docker", "logs", names["node"], check=False))
        pid = int(inspect(names["node"], "{{.State.Pid}}"))
        yield Node(name=names["node"], pid=pid, netns=f"/proc/{pid}/ns/net",
                   server=names["server"],
                   counters=ProcNetDevCounters(lambda: pid))
    finally:
        for name in names.values():
            sh("docker", "rm", "-f", name, check=False)
        for net in nets.values():
            sh("docker", "network", "rm", net, check=False)


class NsMetadata:
    """The agent's live metadata endpoint on one address of the node's namespace (the
    agent lives there; this test's process does not, so the server runs in a process
    that does)."""

    def __init__(self, netns: str, address: str) -> None:
        code = ("import sys, time\n"
                "from node_agent.metadata.sampler import MetadataSampler\n"
                "from node_agent.metadata.server import MetadataServer\n"
                f"s = MetadataServer(MetadataSampler({{}}), host={address!r}, "
                f"port={METADATA_PORT}); s.start(); print('up', flush=True)\n"
                "sys.stdin.read()\n")
        self.proc = subprocess.Popen(["nsenter", f"--net={netns}", sys.executable, "-c", code],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "up"

    def close(self) -> None:
        self.proc.kill()
        self.proc.communicate()


def confined(node: Node, **kwargs: Any) -> ConfinedNetwork:
    return ConfinedNetwork(
        [SimRoute("op0", SERVER["op0"], NODE["op0"]),
         SimRoute("op1", SERVER["op1"], NODE["op1"])],
        denied=[f"{CONTROL}.0/24", OTHER_NODE], metadata_port=METADATA_PORT,
        metadata_listen=lambda address: NsMetadata(node.netns, address),
        node_netns=node.netns, **kwargs)


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


def start_holder(name: str, needs: HolderNeeds) -> tuple[int, str]:
    """The smallest holder the seam asks for: the node image, every capability dropped
    but those the network asks for, the network's command; returns (pid, sandbox)."""
    net = (["--network", needs.network_mode] if needs.network_mode else [])
    caps = [a for c in needs.cap_add for a in ("--cap-add", c)]
    cmd = list(needs.command or ("sleep", "infinity"))
    sh("docker", "run", "-d", "--name", name, *net, "--cap-drop", "ALL", *caps,
       "--security-opt", "no-new-privileges", "--entrypoint", cmd[0], IMAGE, *cmd[1:])
    return int(inspect(name, "{{.State.Pid}}")), inspect(name, "{{.NetworkSettings.SandboxKey}}")


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
           SERVER["op0"], "-B", "198.18.0.2", "-n", "4M", check=False)
        state = backstop.state(run_id)
        tx, rx = node.moved(before)["op0"]
    finally:
        backstop.disarm(run_id)
    assert state.spent, state
    assert tx + rx < 1_400_000, (tx, rx, state)   # its 1 MB and what was in flight
    assert tx > 500_000, (tx, rx)                 # it counted the run, not nothing


def iperf_rate(where: list[str], bind: str) -> float:
    out = sh(*where, "iperf3", "-c", SERVER["op0"], "-B", bind, "-t", "6", "-O", "2", "-J")
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"])


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
