"""A confined run on the compose fleet (``run_network: confined`` in every node's
agent config): done-means 2 of "Every run confined" for what an ordinary experiment
does, end to end. A TAT booked on se-01's op0 runs in a namespace of its own, from its
address there (198.18.0.2, source-NATed to the SIM's), keeps the link's rate, moves
nothing on op1, and leaves no holder, veth or nftables table behind. (What a hostile
experiment tries is tests/integration/test_run_network.py, on the same node-links.sh.)"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import time

import pytest

from node_agent.engine import LABEL_RUN, holder_name
from tests.e2e.conftest import FINAL, Fleet, story

pytestmark = pytest.mark.e2e

NODE = "testbed-node-se-01"


def node_sh(command: str) -> str:
    return subprocess.run(["docker", "exec", NODE, "sh", "-c", command], check=True,
                          capture_output=True, text=True).stdout


def tx_rx(interface: str) -> tuple[int, int]:
    out = node_sh(f"cat /sys/class/net/{interface}/statistics/tx_bytes "
                  f"/sys/class/net/{interface}/statistics/rx_bytes").split()
    return int(out[0]), int(out[1])


@pytest.mark.quiet  # asserts the TAT's rate: alone, in phase 2
def test_a_tat_on_op0_runs_confined_and_moves_nothing_on_op1(fleet: Fleet) -> None:
    fleet.wait_online("se-01")
    op1_before = tx_rx("op1")
    run_id = fleet.submit("se-01", "op0", duration_s=10)
    run = fleet.wait(run_id, FINAL, timeout_s=180)
    assert run["state"] == "done", story(run)
    op1_after = tx_rx("op1")
    assert op1_after[0] == op1_before[0], (op1_before, op1_after)
    result = fleet.get(f"/api/v1/runs/{run_id}/result")
    assert abs(result["mean_bps"] - 10e6) / 10e6 < 0.10, result["mean_bps"]
    bundle = fleet.http.get(f"/api/v1/runs/{run_id}/bundle")
    assert bundle.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(bundle.content)) as tar:
        raw = tar.extractfile("results/iperf3.json")
        assert raw is not None
        iperf = json.loads(raw.read())
    # the experiment's side of the connection is its own namespace's address
    assert iperf["start"]["connected"][0]["local_host"] == "198.18.0.2", iperf["start"]
    # nothing of the run is left in the node: no veth, no run table, no holder
    assert "tbrun" not in node_sh("ip -o link")
    assert "testbed_run_" not in node_sh("nft list tables")
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={LABEL_RUN}={run_id}"],
                          capture_output=True, text=True, check=True).stdout
    assert left.strip() == "", "the run's holder or experiment container is left"


#: Connection attempts from inside a run's namespace: "ok" or the error, per target.
PROBE = r"""
import json, socket, sys, urllib.request, urllib.error
out = {}
for name, host, port in json.loads(sys.argv[1]):
    try:
        socket.create_connection((host, port), timeout=2).close(); out[name] = "ok"
    except OSError as e:
        out[name] = f"refused: {e}"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(500):
    try: s.sendto(b"x" * 1000, ("172.30.2.10", 5201))
    except OSError: pass
url = sys.argv[2]
try: out["metadata GET"] = urllib.request.urlopen(url + "/modem", timeout=3).status
except (OSError, urllib.error.HTTPError) as e: out["metadata GET"] = str(e)
try:
    urllib.request.urlopen(urllib.request.Request(url + "/modem", data=b"{}", method="POST"),
                           timeout=3); out["metadata POST"] = 200
except urllib.error.HTTPError as e: out["metadata POST"] = e.code
except OSError as e: out["metadata POST"] = str(e)
print(json.dumps(out))
"""


def control_ip(container: str) -> str:
    """The container's address on the control plane's networks: the control network, or
    for the stores (PostgreSQL, InfluxDB) the stores network that only the orchestrators
    join."""
    out = subprocess.run(
        ["docker", "inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}"
         "{{$k}}={{$v.IPAddress}} {{end}}", container],
        capture_output=True, text=True, check=True).stdout.split()
    return next(kv.split("=", 1)[1] for kv in out
                if kv.split("=", 1)[0].endswith(("control", "stores")))


def test_a_container_in_a_runs_namespace_reaches_only_its_server(fleet: Fleet) -> None:
    """Matrix rows 7 and 8 on the fleet: while a TAT runs confined on se-01's op0, a
    container started in its namespace (as an experiment is: every capability dropped
    but NET_RAW) connects to the orchestrator, PostgreSQL, InfluxDB, another node, the
    agent and link-local, sends to op1's server, and reads and writes the metadata."""
    fleet.wait_online("se-01")
    run_id = fleet.submit("se-01", "op0", duration_s=20)
    holder = holder_name(run_id)  # the agent's name for the run's holder
    for _ in range(300):
        state = fleet.get(f"/api/v1/runs/{run_id}")["state"]
        if state == "running" or state in FINAL:
            break
        time.sleep(0.1)
    assert state == "running", state
    targets = [
        ("orchestrator", control_ip("testbed-orchestrator"), 8080),
        ("front", control_ip("testbed-front"), 8080),
        ("PostgreSQL", control_ip("testbed-postgres"), 5432),
        ("InfluxDB", control_ip("testbed-influxdb"), 8086),
        ("another node (control)", control_ip("testbed-node-se-02"), 8765),
        ("another node (Telia)", "172.30.1.22", 5201),
        ("the agent (control)", control_ip(NODE), 8765),
        ("the agent (gateway, not metadata)", "198.18.0.1", 22),
        ("link-local", "169.254.169.254", 80),
        ("the run's server", "172.30.1.10", 5201),
    ]
    op1_before = tx_rx("op1")
    probe = subprocess.run(
        ["docker", "run", "--rm", "--network", f"container:{holder}", "--cap-drop", "ALL",
         "--cap-add", "NET_RAW", "--entrypoint", "python3", "testbed/node:dev", "-c", PROBE,
         json.dumps(targets), "http://198.18.0.1:8765"],
        capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    reached = json.loads(probe.stdout)
    time.sleep(1)
    op1_after = tx_rx("op1")
    assert reached.pop("the run's server") == "ok", reached   # the probe itself works
    assert (reached.pop("metadata GET"), reached.pop("metadata POST")) == (200, 405)
    assert all(r.startswith("refused") for r in reached.values()), reached
    assert op1_after[0] == op1_before[0], (op1_before, op1_after)
    run = fleet.wait(run_id, FINAL, timeout_s=180)
    assert run["state"] == "done", story(run)
