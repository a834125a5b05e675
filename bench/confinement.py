"""What confining a run's network costs, in one run: a run's start latency and a TAT's
rate, confined (node_agent.runnet.ConfinedNetwork: a holder with a namespace of its
own, a veth per SIM, source NAT, the run's nftables table) against shared (the
experiment in the node's namespace, as before).

On the compose fleet's node in small (tests/integration/runnet_rig.py: the fleet's
node-links.sh, two SIMs behind linkem with the fleet's profiles). Rounds alternate the
two, so that the machine's other work falls on both alike.

- start latency: from the first engine call to the experiment container running. Shared:
  ``docker run -d`` of the experiment in the node's namespace. Confined: the holder's
  ``docker run -d`` (network none, NET_ADMIN, its command), the network's attach (veth,
  routes, rule, nftables table, metadata listener, the wait for the holder to be ready),
  then the experiment's ``docker run -d`` in the holder's namespace.
- TAT rate: iperf3 uplink to the server for ``--seconds`` through op0's emulated link
  (10 Mbit/s, 20 ms each way), the receiver's mean, from an experiment container in
  each namespace.

The bench process itself enters the node's network namespace, as the agent lives
there: the network's ``ip`` and ``nft`` calls, its readiness probe and the metadata
listener cost what they cost the agent. Needs root and a Docker engine, alone on the
machine (it starts containers and measures rates):

    .venv/bin/python bench/confinement.py --rounds 5
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from node_agent.metadata.sampler import MetadataSampler
from node_agent.metadata.server import MetadataServer
from node_agent.runnet import ConfinedNetwork, SimRoute
from tests.integration.runnet_rig import (
    DENIED,
    IMAGE,
    METADATA_PORT,
    NODE,
    SERVER,
    Node,
    fleet_node,
    sh,
    start_holder,
)

#: setns(2)'s flag for a network namespace (linux/sched.h).
CLONE_NEWNET = 0x40000000


def start_shared(node: Node, name: str) -> float:
    t0 = time.perf_counter()
    sh("docker", "run", "-d", "--name", name, "--network", f"container:{node.name}",
       "--cap-drop", "ALL", "--cap-add", "NET_RAW", "--entrypoint", "sleep", IMAGE, "infinity")
    return time.perf_counter() - t0


def start_confined(name: str, run_id: str, network: ConfinedNetwork,
                   phases: dict[str, list[float]]) -> float:
    t0 = time.perf_counter()
    pid, sandbox = start_holder(f"{name}-holder", network.holder_needs(run_id, ["op0"]))
    t1 = time.perf_counter()
    network.attach(run_id, holder_pid=pid, sandbox_key=sandbox, booked=["op0"])
    t2 = time.perf_counter()
    sh("docker", "run", "-d", "--name", name, "--network", f"container:{name}-holder",
       "--cap-drop", "ALL", "--cap-add", "NET_RAW", "--entrypoint", "sleep", IMAGE, "infinity")
    t3 = time.perf_counter()
    for phase, dt in (("holder", t1 - t0), ("attach", t2 - t1), ("experiment", t3 - t2)):
        phases.setdefault(phase, []).append(dt)
    return t3 - t0


def enter_netns(path: str) -> None:
    """This process into the node's network namespace, as the agent lives there: its
    ``ip``/``nft`` children, its readiness probe and its metadata listener with it."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(fd)


def tat(name: str, bind: str, seconds: int) -> float:
    out = sh("docker", "exec", name, "iperf3", "-c", SERVER["op0"], "-B", bind,
             "-t", str(seconds), "-O", "1", "-J")
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=8, help="each TAT's length")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (nsenter into the node's namespace)", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    starts: dict[str, list[float]] = {"shared": [], "confined": []}
    rates: dict[str, list[float]] = {"shared": [], "confined": []}
    phases: dict[str, list[float]] = {}
    with fleet_node() as node:
        enter_netns(node.netns)
        sampler = MetadataSampler({})
        endpoint = MetadataServer(sampler, port=METADATA_PORT)  # the node's loopback
        endpoint.start()
        for r in range(args.rounds):
            order = ("shared", "confined") if r % 2 == 0 else ("confined", "shared")
            for kind in order:
                run_id = f"bench-{uuid.uuid4().hex[:6]}"
                name = f"tbtest-rn-bench-{run_id}"
                network = ConfinedNetwork(
                    [SimRoute("op0", SERVER["op0"], NODE["op0"]),
                     SimRoute("op1", SERVER["op1"], NODE["op1"])],
                    denied=DENIED, metadata_port=METADATA_PORT,
                    metadata_listen=endpoint.listen_also)
                try:
                    if kind == "shared":
                        starts[kind].append(start_shared(node, name))
                        rates[kind].append(tat(name, NODE["op0"], args.seconds))
                    else:
                        starts[kind].append(start_confined(name, run_id, network, phases))
                        rates[kind].append(tat(name, "198.18.0.2", args.seconds))
                finally:
                    sh("docker", "rm", "-f", name, check=False)
                    if kind == "confined":
                        network.detach(run_id)
                        sh("docker", "rm", "-f", f"{name}-holder", check=False)
                print(f"round {r + 1} {kind:8s} start {starts[kind][-1]:.3f} s  "
                      f"TAT {rates[kind][-1] / 1e6:.2f} Mbit/s", flush=True)
        endpoint.stop()
    load_after = os.getloadavg()
    med = {k: (statistics.median(starts[k]), statistics.median(rates[k])) for k in starts}
    print()
    print(f"machine: {os.cpu_count()} cores, load average (1, 5, 15 min) before "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    for kind in ("shared", "confined"):
        print(f"{kind:8s} start median {med[kind][0]:.3f} s (min {min(starts[kind]):.3f}, "
              f"max {max(starts[kind]):.3f}); TAT median {med[kind][1] / 1e6:.2f} Mbit/s "
              f"(min {min(rates[kind]) / 1e6:.2f}, max {max(rates[kind]) / 1e6:.2f})")
    print("confined start by phase (median): " + ", ".join(
        f"{k} {statistics.median(v):.3f} s" for k, v in phases.items()))
    print(f"ratio confined/shared: start latency {med['confined'][0] / med['shared'][0]:.2f}, "
          f"TAT rate {med['confined'][1] / med['shared'][1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
