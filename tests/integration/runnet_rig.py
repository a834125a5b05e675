"""The compose fleet's node in small, for a confined run's network: its tests
(tests/integration/test_run_network.py) and its bench (bench/confinement.py).

Three bridge networks (control 10.231.0.0/24; operators A 10.231.1.0/24 and B
10.231.2.0/24); a node container from the node image running the fleet's own
deploy/emulation/node-links.sh (two SIMs, op0 and op1, each behind its linkem with the
fleet's Telia and Tele2 profiles); a measurement server at .10 on both operator networks
(iperf3, a TCP answerer, a UDP recorder); and "the rest of the platform" on the control
network at .4 (stand-ins answering on the orchestrator's, PostgreSQL's and InfluxDB's
ports) and on operator A at .22 (another node). Everything is named tbtest-rn-* and
removed on leaving :func:`fleet_node`. Needs root (nsenter into the node's namespace)
and a Docker engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from node_agent.interfaces import Counters, ProcNetDevCounters
from node_agent.runnet import ConfinedNetwork, HolderNeeds, SimRoute
from tests.conftest import REPO

SUFFIX = f"{os.getpid()}-{uuid.uuid4().hex[:4]}"
IMAGE = "testbed/node:dev"
TAT_IMAGE = "testbed/exp-tat:1"
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
QUOTA_IPERF_PORT = 5209
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


@contextmanager
def fleet_node() -> Iterator[Node]:
    """The node and its networks, removed on leaving."""
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
        # iperf3 serves one test at a time: a port each for the TATs (5201-5208, as the
        # measurement server, which tat tries in turn) and one for the quota's test,
        # whose cut connection leaves its server busy for a while.
        for port in (*range(5201, 5209), QUOTA_IPERF_PORT):
            sh("docker", "exec", "-d", names["server"], "iperf3", "-s", "-p", str(port))
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
            "--sysctl", "net.ipv4.tcp_no_metrics_save=1",   # as the fleet's nodes
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


#: What the node denies its runs beyond link-local: the control network (the
#: orchestrator, PostgreSQL, InfluxDB) and another node on operator A's network.
DENIED = (f"{CONTROL}.0/24", OTHER_NODE)


def confined(node: Node, *, denied: Sequence[str] = DENIED, **kwargs: Any) -> ConfinedNetwork:
    return ConfinedNetwork(
        [SimRoute("op0", SERVER["op0"], NODE["op0"]),
         SimRoute("op1", SERVER["op1"], NODE["op1"])],
        denied=denied, metadata_port=METADATA_PORT,
        metadata_listen=lambda address: NsMetadata(node.netns, address),
        node_netns=node.netns, **kwargs)


def start_holder(name: str, needs: HolderNeeds) -> tuple[int, str]:
    """The smallest holder the seam asks for: the node image, every capability dropped
    but those the network asks for, the network's command; returns (pid, sandbox)."""
    net = (["--network", needs.network_mode] if needs.network_mode else [])
    net += [a for k, v in needs.sysctls.items() for a in ("--sysctl", f"{k}={v}")]
    caps = [a for c in needs.cap_add for a in ("--cap-add", c)]
    cmd = list(needs.command or ("sleep", "infinity"))
    sh("docker", "run", "-d", "--name", name, *net, "--cap-drop", "ALL", *caps,
       "--security-opt", "no-new-privileges", "--entrypoint", cmd[0], IMAGE, *cmd[1:])
    return int(inspect(name, "{{.State.Pid}}")), inspect(name, "{{.NetworkSettings.SandboxKey}}")


