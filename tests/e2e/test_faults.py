"""Faults injected into the compose fleet's real agent, and what the platform makes of
them: nothing lost, nothing stored twice."""

from __future__ import annotations

import hashlib
import subprocess

import pytest

from node_agent.faults import DAMAGE_NEXT_CHUNK
from tests.e2e.chaos import sh as _sh
from tests.e2e.conftest import FINAL, Fleet, story

pytestmark = pytest.mark.e2e

NODE = "testbed-node-se-02"
FAULTS = "/var/lib/testbed-agent/faults"


def test_chunk_damaged_in_transit_is_sent_again_and_archived_once(fleet: Fleet) -> None:
    """The agent's next chunk arrives with a byte flipped: the orchestrator drops what
    it held and says so (fault: corrupted), the agent sends the bundle again from offset
    0, and the run ends done with its bundle archived once, byte for byte."""
    fleet.wait_online("se-02")
    _sh(NODE, f"mkdir -p {FAULTS} && touch {FAULTS}/{DAMAGE_NEXT_CHUNK}")
    run_id = fleet.submit("se-02", "op0", duration_s=5)
    run = fleet.wait(run_id, FINAL, timeout_s=180)
    assert run["state"] == "done", story(run)
    assert _sh(NODE, f"ls {FAULTS}").split() == []  # the fault fired, once
    logs = subprocess.run(["docker", "logs", NODE], capture_output=True, text=True,
                          check=True)
    agent_log = logs.stdout + logs.stderr
    assert f"run {run_id}: fault injected" in agent_log
    assert f"run {run_id}: " in agent_log and "sending it again from offset 0" in agent_log
    bundle = fleet.http.get(f"/api/v1/runs/{run_id}/bundle")
    assert bundle.status_code == 200
    assert hashlib.sha256(bundle.content).hexdigest() == run["bundle_sha256"]
    stored = _sh("testbed-orchestrator",
                 f"find /var/lib/testbed/archive -path '*/{run_id}/*' -name bundle.tar.gz")
    assert len(stored.split()) == 1, stored
    parts = _sh("testbed-orchestrator", f"ls /var/lib/testbed/uploads | grep {run_id} || true")
    assert parts.strip() == "", parts  # nothing left half-held
