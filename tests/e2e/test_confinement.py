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

import pytest

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
    holders = subprocess.run(["docker", "ps", "-aq", "--filter", "name=testbed-holder-"],
                             capture_output=True, text=True, check=True).stdout
    assert holders.strip() == ""
