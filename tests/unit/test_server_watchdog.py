"""The measurement server's iperf3 watchdog: its reading of /proc and its judgement."""

from __future__ import annotations

from tests.conftest import load_server_module

wd = load_server_module("iperf3_watchdog")

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1
   1: 0A011EAC:1451 16011EAC:DA69 01 00000001:00000000 01:00000064 00000008     0        0 1002 1
   2: 0A011EAC:1452 15011EAC:B14D 08 00000000:00000026 00:00000000 00000000     0        0 0 1
"""


def test_established_sockets_are_found_by_inode() -> None:
    # the listener (0A) and a connection waiting in the backlog (CLOSE-WAIT, 08) are not
    assert wd.established_inodes([TCP, "header only\n"]) == {1002}


def test_io_counts_bytes_read_and_written() -> None:
    io = "rchar: 1200\nwchar: 34\nsyscr: 7\nsyscw: 3\nread_bytes: 0\nwrite_bytes: 0\n"
    assert wd.parse_io(io) == 1234


def test_a_server_is_stuck_only_when_connected_and_silent_long_enough() -> None:
    w = wd.Watch(stuck_s=60)
    assert not w.observe(7, connected=True, io_bytes=100, now=0)
    assert not w.observe(7, connected=True, io_bytes=100, now=59)
    assert w.observe(7, connected=True, io_bytes=100, now=60)
    # bytes moved: a test in progress; the silence is counted again from there
    assert not w.observe(8, connected=True, io_bytes=1, now=0)
    assert not w.observe(8, connected=True, io_bytes=2, now=50)
    assert not w.observe(8, connected=True, io_bytes=2, now=100)
    assert w.observe(8, connected=True, io_bytes=2, now=110)
    # an idle server waiting for clients is never stuck
    assert not w.observe(9, connected=False, io_bytes=5, now=0)
    assert not w.observe(9, connected=False, io_bytes=5, now=1000)
    w.forget_others({9})
    assert set(w.seen) == {9}
