"""Agent configuration: YAML file plus environment."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from node_agent.config import load_config, parse_config
from node_agent.errors import ConfigError

YAML = """
node_id: se-01                      # informational; the token identifies the node
orchestrator_url: http://orchestrator:8080
model: emulated-apu2
architecture: amd64
state_dir: /var/lib/testbed-agent
netns_container: testbed-node-se-01
interfaces:
  - name: op0
    operator: {mcc_mnc: "240-01", name: Telia}
    rat: LTE
    server_address: 172.30.1.10
"""


def test_documented_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(YAML)
    config = load_config({"TESTBED_AGENT_CONFIG": str(path), "TESTBED_NODE_TOKEN": "tok"})
    assert config.node_id == "se-01" and config.token == "tok"
    assert config.netns_container == "testbed-node-se-01"
    op0 = config.interface("op0")
    assert op0 is not None and op0.operator.mcc_mnc == "240-01"
    assert config.interface("op9") is None
    assert "tok" not in repr(config)


def test_environment_overrides_the_url(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(YAML)
    config = load_config({
        "TESTBED_AGENT_CONFIG": str(path), "TESTBED_NODE_TOKEN": "tok",
        "TESTBED_ORCHESTRATOR_URL": "http://127.0.0.1:8080",
    })
    assert config.orchestrator_url == "http://127.0.0.1:8080"


def test_token_is_required_and_not_in_the_file() -> None:
    raw = {"node_id": "n", "orchestrator_url": "http://o", "netns_container": "c",
           "interfaces": []}
    with pytest.raises(ConfigError, match="TESTBED_NODE_TOKEN"):
        parse_config(raw, {})
    with pytest.raises(ConfigError, match="not in the file"):
        parse_config({**raw, "token": "x"}, {"TESTBED_NODE_TOKEN": "t"})


def test_invalid_config_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="interfaces"):
        parse_config(
            {"node_id": "n", "orchestrator_url": "http://o", "netns_container": "c",
             "interfaces": []},
            {"TESTBED_NODE_TOKEN": "t"},
        )
    with pytest.raises(ConfigError, match="cannot read"):
        load_config({"TESTBED_AGENT_CONFIG": str(tmp_path / "nope.yaml")})


@pytest.mark.parametrize(("written", "machine", "reported"), [
    (None, "aarch64", "arm64"),  # read from the machine, in the OCI's name
    (None, "x86_64", "amd64"),
    ("unknown", "aarch64", "arm64"),  # an old config's placeholder: read too
    ("aarch64", "x86_64", "arm64"),  # what the file says wins, normalised
])
def test_the_architecture_is_the_machines_in_oci_names_unless_the_file_says(
        monkeypatch: pytest.MonkeyPatch, written: str | None, machine: str,
        reported: str) -> None:
    monkeypatch.setattr("platform.machine", lambda: machine)
    lines = [line for line in YAML.splitlines() if not line.startswith("architecture:")]
    if written is not None:
        lines.append(f"architecture: {written}")
    config = parse_config(yaml.safe_load("\n".join(lines)), {"TESTBED_NODE_TOKEN": "t"})
    assert config.architecture == reported
    assert config.native_tools is True  # the default: a node has its tools
