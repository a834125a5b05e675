"""What an experiment container receives (the experiment contract), built purely."""

from __future__ import annotations

import io
import json
import tarfile
from datetime import UTC, datetime

import pytest

from node_agent.config import parse_config
from node_agent.engine import config_tar
from node_agent.errors import RunnerError
from node_agent.spec import build_spec
from testbed_common.wire import Assignment

CONFIG = parse_config(
    {
        "node_id": "se-01", "orchestrator_url": "http://o:8080",
        "netns_container": "testbed-node-se-01",
        "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
                        "rat": "LTE", "server_address": "172.30.1.10"}],
    },
    {"TESTBED_NODE_TOKEN": "t"},
)
ASSIGNMENT = Assignment(
    run_id="r-1", experiment="tat", image="testbed/exp-tat:1",
    parameters={"duration_s": 10, "direction": "uplink", "bin_s": 0.1}, interface="op0",
    not_before=datetime(2026, 11, 22, 2, 0, tzinfo=UTC),
    deadline=datetime(2026, 11, 22, 2, 10, tzinfo=UTC), max_bytes=25_000_000,
)


def test_config_json_follows_the_contract() -> None:
    spec = build_spec(ASSIGNMENT, CONFIG, interface_address="172.30.1.21")
    assert spec.config_json() == {
        "format": "testbed.run-config", "version": 1,
        "run_id": "r-1", "experiment": "tat", "node_id": "se-01",
        "interface": "op0", "interface_address": "172.30.1.21",
        "operator": {"mcc_mnc": "240-01", "name": "Telia"},
        "server_address": "172.30.1.10",
        "parameters": {"duration_s": 10, "direction": "uplink", "bin_s": 0.1},
        "deadline": "2026-11-22T02:10:00+00:00",
        "max_bytes": 25000000,
    }


def test_environment_follows_the_contract() -> None:
    env = build_spec(ASSIGNMENT, CONFIG, interface_address="172.30.1.21").environment()
    assert env["TESTBED_CONFIG"] == "/testbed/config.json"
    assert env["TESTBED_RESULTS"] == "/results"
    assert env["TESTBED_RUN_ID"] == "r-1"
    assert (env["TESTBED_INTERFACE"], env["TESTBED_INTERFACE_ADDRESS"]) == ("op0", "172.30.1.21")
    assert env["TESTBED_SERVER"] == "172.30.1.10"
    assert (env["TESTBED_PARAM_DURATION_S"], env["TESTBED_PARAM_DIRECTION"]) == ("10", "uplink")


def test_unknown_interface_is_a_named_refusal() -> None:
    with pytest.raises(RunnerError, match="interface op7 is not configured on this node"):
        build_spec(ASSIGNMENT.model_copy(update={"interface": "op7"}), CONFIG,
                   interface_address=None)


def test_config_tar_is_a_read_only_config() -> None:
    """Written into the run's config volume, which the experiment mounts read-only."""
    spec = build_spec(ASSIGNMENT, CONFIG, interface_address=None)
    with tarfile.open(fileobj=io.BytesIO(config_tar(spec.config_json()))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert list(members) == ["config.json"]
        assert members["config.json"].mode == 0o444
        handle = tar.extractfile("config.json")
        assert handle is not None and json.load(handle)["run_id"] == "r-1"
