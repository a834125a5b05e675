"""Interface counters from sysfs and /proc/<pid>/net/dev (recorded text)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.interfaces import (
    Counters,
    InterfaceMissing,
    ProcNetDevCounters,
    SysfsCounters,
    parse_proc_net_dev,
)

# /proc/<pid>/net/dev of a container on this machine (runs of spaces shortened).
PROC_NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls \
carrier compressed
    lo: 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
  eth0: 6012345 4321 0 0 0 0 0 0 1234567 2345 0 0 0 0 0 0
"""


def test_parse_proc_net_dev() -> None:
    table = parse_proc_net_dev(PROC_NET_DEV)
    assert table["eth0"] == Counters(rx_bytes=6012345, tx_bytes=1234567)
    assert table["lo"].total == 0


def test_proc_counters(tmp_path: Path) -> None:
    (tmp_path / "42" / "net").mkdir(parents=True)
    (tmp_path / "42" / "net" / "dev").write_text(PROC_NET_DEV)
    source = ProcNetDevCounters(lambda: 42, proc=tmp_path)
    assert source.read("eth0").tx_bytes == 1234567
    with pytest.raises(InterfaceMissing, match="op0"):
        source.read("op0")


def test_sysfs_counters(tmp_path: Path) -> None:
    stats = tmp_path / "op0" / "statistics"
    stats.mkdir(parents=True)
    (stats / "rx_bytes").write_text("100\n")
    (stats / "tx_bytes").write_text("250\n")
    assert SysfsCounters(tmp_path).read("op0") == Counters(100, 250)
    with pytest.raises(InterfaceMissing, match="op1"):
        SysfsCounters(tmp_path).read("op1")


def test_real_loopback_counters() -> None:
    assert SysfsCounters().read("lo").rx_bytes >= 0
