"""Kills iperf3 servers stuck on a client that vanished; testbed-server restarts them.

iperf3 serves one client at a time and reads the handshake with blocking reads. A
node that loses its link between connecting and sending its cookie or parameters (a
mobile node in a handover, an agent killed mid-run) leaves the server blocked in that
read: nothing is in flight, so TCP never times the connection out, ``--idle-timeout``
only covers the idle loop, and every later client of that port waits for ever. Over
days of campaigns ports would be lost one by one.

The sign: an iperf3 server holding an established connection that has neither read
nor written a byte (``/proc/<pid>/io`` rchar + wchar) for ``--stuck-s`` seconds. A
test in progress moves bytes every interval (the server reads an uplink's data or
writes a downlink's, and its 100 ms reports); a handshake takes a few round trips.

Only processes in this network namespace are judged (their sockets must appear in this
namespace's /proc/net/tcp), so the watchdog never touches another host's iperf3.
Standard library only: the server image has python3 and nothing else to offer.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: /proc/net/tcp's state code for an established connection.
ESTABLISHED = "01"
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def established_inodes(tables: Iterable[str]) -> set[int]:
    """Socket inodes of established TCP connections in /proc/net/tcp{,6} text (pure)."""
    inodes = set()
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == ESTABLISHED and fields[9].isdigit():
                inodes.add(int(fields[9]))
    return inodes


def parse_io(text: str) -> int:
    """Bytes a process read and wrote (``rchar`` + ``wchar`` of /proc/<pid>/io; pure)."""
    total = 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("rchar", "wchar"):
            total += int(value)
    return total


@dataclass
class Seen:
    io_bytes: int
    since: float


class Watch:
    """Which servers are stuck, from successive observations (pure: time is passed in)."""

    def __init__(self, stuck_s: float) -> None:
        self.stuck_s = stuck_s
        self.seen: dict[int, Seen] = {}

    def observe(self, pid: int, *, connected: bool, io_bytes: int, now: float) -> bool:
        """Records one look at ``pid``; True when it has been connected and silent for
        ``stuck_s`` seconds."""
        last = self.seen.get(pid)
        if not connected or last is None or last.io_bytes != io_bytes:
            self.seen[pid] = Seen(io_bytes, now)
            return False
        return now - last.since >= self.stuck_s

    def forget_others(self, alive: set[int]) -> None:
        for pid in set(self.seen) - alive:
            del self.seen[pid]


def iperf3_servers(proc: Path = Path("/proc")) -> list[int]:
    """Pids of ``iperf3 -s`` processes visible here."""
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone
        if argv and argv[0].endswith(b"iperf3") and b"-s" in argv:
            pids.append(int(entry.name))
    return pids


def socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(int(target[8:-1]))
    except OSError:
        pass  # gone, or not ours to read
    return inodes


def read_tables() -> list[str]:
    out = []
    for path in TCP_TABLES:
        try:
            out.append(Path(path).read_text())
        except OSError:
            continue
    return out


def one_pass(watch: Watch, now: float) -> list[int]:
    """Looks at every iperf3 server once; kills and returns the stuck ones."""
    established = established_inodes(read_tables())
    pids = iperf3_servers()
    watch.forget_others(set(pids))
    killed = []
    for pid in pids:
        try:
            io_bytes = parse_io(Path(f"/proc/{pid}/io").read_text())
        except OSError:
            continue
        connected = bool(socket_inodes(pid) & established)
        if watch.observe(pid, connected=connected, io_bytes=io_bytes, now=now):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            killed.append(pid)
            print(f"iperf3-watchdog: iperf3 server {pid} held a connection without a "
                  f"byte for {watch.stuck_s:.0f} s (a client vanished mid-handshake); "
                  "killed it, it restarts", file=sys.stderr, flush=True)
    return killed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stuck-s", type=float, default=60.0,
                        help="silence on a held connection that means stuck (default 60)")
    parser.add_argument("--interval-s", type=float, default=5.0,
                        help="time between looks (default 5)")
    args = parser.parse_args(argv)
    watch = Watch(args.stuck_s)
    while True:
        one_pass(watch, time.monotonic())
        time.sleep(args.interval_s)


if __name__ == "__main__":
    sys.exit(main())
