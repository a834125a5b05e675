"""Faults done to the compose fleet from outside, as an operator's bad day would: a cut
control link, a killed or restarted container, a command run inside one, a fault hook
armed on a node's agent (node_agent.faults). The fault matrix's rows
(``tests/e2e/test_fault_*.py``) share these so that each fault is made one way, and
undone even when the row's assertions fail."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO

#: The compose project's network that carries the API (heartbeats, uploads); the
#: measurement links (``op-*``) are separate, so a cut here leaves a node measuring.
CONTROL = "testbed_control"


def container(node: str) -> str:
    """The compose container of fleet node ``node`` (e.g. ``se-02``)."""
    return f"testbed-node-{node}"


def docker(*args: str, check: bool = True) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True,
                          check=check).stdout


def sh(name: str, command: str) -> str:
    """``command`` run by ``sh -c`` in container ``name``; its stdout."""
    return docker("exec", name, "sh", "-c", command)


def control_address(name: str) -> str:
    """The container's fixed address on the control network (compose pins them), so a
    reconnection restores the same one."""
    return docker("inspect", "-f",
                  "{{(index .NetworkSettings.Networks \"" + CONTROL + "\").IPAddress}}",
                  name).strip()


@contextmanager
def partitioned(name: str) -> Iterator[None]:
    """Container ``name`` cut from the control network for the ``with`` block, and
    reconnected at its old address however the block ends."""
    address = control_address(name)
    docker("network", "disconnect", CONTROL, name)
    try:
        yield
    finally:
        docker("network", "connect", "--ip", address, CONTROL, name)


def read_bytes(name: str, path: str) -> bytes:
    """The file at ``path`` in container ``name``, byte for byte."""
    return subprocess.run(["docker", "exec", name, "cat", path], capture_output=True,
                          check=True).stdout


def kill(name: str) -> None:
    """SIGKILL to the container's PID 1 (no clean shutdown; for a node, its agent):
    the container stops with it, as a node whose agent crashed or lost power does."""
    docker("kill", "--signal", "KILL", name)


def pid1(name: str) -> str:
    """The command line of the container's PID 1, to show which process a kill hits."""
    return sh(name, "tr '\\0' ' ' < /proc/1/cmdline").strip()


#: Where a node's agent looks for armed faults (node_agent.faults), in its state volume.
FAULTS = "/var/lib/testbed-agent/faults"


def arm(node: str, fault: str, value: str = "") -> None:
    """Arm ``fault`` (a file name of node_agent.faults) on ``node``'s agent."""
    sh(container(node), f"mkdir -p {FAULTS} && printf '%s' '{value}' > {FAULTS}/{fault}")


def disarm(node: str, fault: str) -> None:
    sh(container(node), f"rm -f {FAULTS}/{fault}")


def node_token(node: str) -> str:
    """The node's agent token, as ``scripts/up`` wrote it in deploy/.secrets/compose.env
    (``NODE_TOKEN_SE_02`` for ``se-02``): what a copy of the agent would send."""
    key = "NODE_TOKEN_" + node.upper().replace("-", "_")
    for line in (REPO / "deploy/.secrets/compose.env").read_text().splitlines():
        name, _, value = line.partition("=")
        if name == key:
            return value
    raise KeyError(f"{key} not in deploy/.secrets/compose.env; run scripts/up")


#: The nftables table :func:`uploads_dropped` adds in a node's network namespace.
DROP_TABLE = "chaos_uploads"
#: "PATCH" in ASCII: the method of every bundle chunk the agent sends (and of nothing
#: else it sends).
_PATCH = "0x5041544348"


@contextmanager
def uploads_dropped(name: str) -> Iterator[None]:
    """Container ``name``'s bundle chunks (its ``PATCH`` requests) are refused on the
    way out for the ``with`` block, while its heartbeats and state reports go through:
    a middlebox that kills large uploads, or a node whose uplink is too poor to upload.
    Runs are still handed out, run, and report ``uploading``; their bundles pile up in
    the spool. The match is on the first bytes of the TCP payload (the request line),
    for segments without options (doff 5) and with timestamps (doff 8)."""
    script = "; ".join([
        f"add table inet {DROP_TABLE}",
        f"add chain inet {DROP_TABLE} out {{ type filter hook output priority 0 ; }}",
        *(f"add rule inet {DROP_TABLE} out tcp dport 8080 tcp doff {doff} "
          f"@th,{doff * 32},40 {_PATCH} reject with tcp reset" for doff in (5, 8)),
    ])
    sh(name, f"nft '{script}'")
    try:
        yield
    finally:
        # gone already if the container was restarted (a new network namespace)
        docker("exec", name, "nft", "delete", "table", "inet", DROP_TABLE, check=False)


def compose(*args: str) -> None:
    """The stack's Docker Compose (scripts/lib.sh: its project, env file, v1 or v2)."""
    subprocess.run(["bash", "-c", f'. "{REPO}/scripts/lib.sh" && compose "$@"', "compose",
                    *args], check=True, capture_output=True, text=True)


@contextmanager
def small_state_disk(node: str, size_bytes: int,
                     config: Mapping[str, Any]) -> Iterator[str]:
    """Fleet node ``node`` recreated with its agent's state (spool, outbox, run
    directories) on a tmpfs of ``size_bytes``, and its agent config changed by
    ``config``; yields the state directory. Recreated as compose defines it however the
    block ends (its own state volume back, unchanged)."""
    state = "/var/lib/testbed-agent-small"
    agent_config = yaml.safe_load((REPO / "deploy" / "fleet" / f"{node}.yaml").read_text())
    agent_config.update({"state_dir": state, **config})
    service = f"node-{node}"
    with tempfile.TemporaryDirectory(prefix="testbed-small-disk-") as tmp:
        config_file = Path(tmp) / "agent.yaml"
        config_file.write_text(yaml.safe_dump(agent_config))
        config_file.chmod(0o644)
        override = Path(tmp) / "override.yml"
        override.write_text(yaml.safe_dump({"version": "2.4", "services": {service: {
            "tmpfs": [f"{state}:size={size_bytes}"],
            "environment": {"TESTBED_AGENT_CONFIG": "/etc/testbed/agent-small.yaml"},
            "volumes": [f"{config_file}:/etc/testbed/agent-small.yaml:ro"],
        }}}))
        compose("-f", str(override), "up", "-d", "--no-deps", service)
        try:
            yield state
        finally:
            compose("up", "-d", "--no-deps", service)
