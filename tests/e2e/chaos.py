"""Faults done to the compose fleet from outside, as an operator's bad day would: a cut
control link, a killed or restarted container, a command run inside one. The fault
matrix's rows (``tests/e2e/test_fault_*.py``) share these so that each fault is made
one way, and undone even when the row's assertions fail."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

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
