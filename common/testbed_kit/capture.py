"""Packet capture of a run's interface with tcpdump, into the run's bundle.

tcpdump runs in the agent's network namespace (the node container's, which the
experiment joins with ``--net=container:``), or is entered into that namespace with
``nsenter --net=/proc/<pid>/ns/net`` when the agent is outside it (``counters_from:
netns_container``). It starts just before the experiment container and stops right
after the container exits or is killed: SIGTERM (tcpdump flushes the file and prints
its statistics), then SIGKILL after ``STOP_TIMEOUT_S``. ``-U`` writes every packet as
it is captured, so even a tcpdump killed hard leaves a readable file (at worst its
last record cut short, which the orchestrator's reader reports and reads up to).

Headers only by default (snap length 96 bytes: Ethernet + IP + TCP with options). The
file is capped at ``max_bytes``: a watcher stops tcpdump once the file reaches it (it
may overshoot by what arrives in one ``WATCH_INTERVAL_S``), so a capture keeps the
start of a run rather than a rotating tail. A capture that cannot be taken never stops
the run: what went wrong is written to meta/capture.json and logs/agent.txt.

The pure parts (the command line, reading tcpdump's statistics) are separate from the
process handling so they are unit-tested without tcpdump.

Shared by the node agent and the measurement server's capture service
(server-image/capture_service.py, the server's side of the same run), which drives its
tcpdump with this module; part of the experiment kit, so the server image copies the
kit alone, without the agent or pydantic.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FORMAT = "testbed.capture"
VERSION = 1
#: Where the agent puts a run's capture in its run directory / bundle: under results/,
#: so that the orchestrator's ingest turns it into flow points.
CAPTURE_DIR = "results/capture"
#: Seconds tcpdump gets to flush and exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 5.0
#: Seconds to wait for tcpdump to say it is listening before the experiment starts.
READY_TIMEOUT_S = 5.0
#: How often the file size is checked against ``max_bytes``, seconds.
WATCH_INTERVAL_S = 0.2
_STDERR_KEEP = 4000


def capture_member(interface: str) -> str:
    """The bundle member a run's capture of ``interface`` is stored as."""
    return f"{CAPTURE_DIR}/{_safe_name(interface)}.pcap"


def _safe_name(interface: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", interface) or "_"


def tcpdump_command(
    interface: str,
    path: Path | str,
    *,
    snaplen: int,
    netns_pid: int | None = None,
    tcpdump: str = "tcpdump",
    as_root: bool = True,
    bpf_filter: Sequence[str] = (),
) -> list[str]:
    """The tcpdump command line for capturing ``interface`` into ``path`` (pure).

    ``-U`` packet-buffered output; ``--immediate-mode`` hands every packet to tcpdump
    as it arrives (without it libpcap's TPACKET_V3 ring delivers in blocks of up to a
    second, and the block still pending at SIGTERM is lost: the run's last ~0.5 s);
    ``-n`` no name lookups; ``-Z root`` keeps root's
    rights when tcpdump runs as root (Debian's tcpdump otherwise drops to user tcpdump,
    which cannot write into the agent's run directory). ``netns_pid`` enters that
    process's network namespace first. ``bpf_filter``: a capture filter's words (the
    measurement server keeps only the run's node: ``host A``), after the options.
    """
    if snaplen <= 0:
        raise ValueError(f"snap length must be positive, not {snaplen}")
    cmd = [tcpdump, "-i", interface, "-s", str(snaplen), "-w", str(path), "-U",
           "--immediate-mode", "-n"]
    if as_root:
        cmd += ["-Z", "root"]
    cmd += list(bpf_filter)
    if netns_pid is not None:
        cmd = ["nsenter", f"--net=/proc/{netns_pid}/ns/net", *cmd]
    return cmd


@dataclass(frozen=True)
class CaptureStats:
    """tcpdump's own count at exit (None: the line was not printed)."""

    packets_captured: int | None = None
    packets_received_by_filter: int | None = None
    packets_dropped_by_kernel: int | None = None
    packets_dropped_by_interface: int | None = None


_STATS_LINES = {
    "packets captured": "packets_captured",
    "packets received by filter": "packets_received_by_filter",
    "packets dropped by kernel": "packets_dropped_by_kernel",
    "packets dropped by interface": "packets_dropped_by_interface",
}
_STATS_RE = re.compile(r"^\s*(\d+)\s+(packets? (?:captured|received by filter|dropped by "
                       r"kernel|dropped by interface))\s*$")


def parse_tcpdump_stats(stderr: str) -> CaptureStats | None:
    """tcpdump's statistics lines ("N packets captured", "N packets received by filter",
    "N packets dropped by kernel", "N packets dropped by interface") from its stderr;
    None when there are none (it was killed, or never ran). Pure."""
    found: dict[str, int] = {}
    for line in stderr.splitlines():
        m = _STATS_RE.match(line)
        if m:
            key = _STATS_LINES[m.group(2).replace("packet ", "packets ")]
            found[key] = int(m.group(1))
    return CaptureStats(**found) if found else None


def _now() -> str:
    return datetime.now(UTC).isoformat()


class RunningCapture:
    """One tcpdump process for one run; :meth:`stop` ends it and returns the meta doc."""

    def __init__(
        self,
        interface: str,
        path: Path,
        *,
        snaplen: int,
        max_bytes: int,
        netns_pid: int | None = None,
        tcpdump: str = "tcpdump",
        bpf_filter: Sequence[str] = (),
    ) -> None:
        self.interface = interface
        self.path = path
        self.snaplen = snaplen
        self.max_bytes = max_bytes
        self.tcpdump = tcpdump
        self.command = tcpdump_command(
            interface, path, snaplen=snaplen, netns_pid=netns_pid, tcpdump=tcpdump,
            as_root=os.geteuid() == 0, bpf_filter=bpf_filter,
        )
        self.error: str | None = None
        self.started_at: str | None = None
        self.stopped_at: str | None = None
        self.stopped_by: str | None = None
        self.exit_code: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: list[str] = []
        self._ready = threading.Event()
        self._done = threading.Event()
        self._reader: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._at_max = False
        self._doc: dict[str, Any] | None = None

    def start(self) -> bool:
        """Start tcpdump and wait until it listens; False (and ``error`` set) on failure."""
        self.started_at = _now()
        for tool in {self.command[0], self.tcpdump}:
            if shutil.which(tool) is None:
                self.error = f"{tool} not found on the node: no capture taken"
                return False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._proc = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        except OSError as e:
            self.error = f"cannot start tcpdump: {e}"
            return False
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._ready.wait(0.05):
            if self._proc.poll() is not None:
                if self._reader is not None:
                    self._reader.join(timeout=1)
                self.exit_code = self._proc.returncode
                self.error = f"tcpdump exited at once with code {self.exit_code}: " + (
                    self._last_error_line() or "no message"
                )
                return False
            if time.monotonic() > deadline:
                self._stderr.append(
                    f"(agent: tcpdump did not say it was listening within {READY_TIMEOUT_S} s)"
                )
                break
        self._watcher = threading.Thread(target=self._watch_size, daemon=True)
        self._watcher.start()
        return True

    def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for raw in self._proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            self._stderr.append(line)
            if "listening on" in line:
                self._ready.set()

    def _watch_size(self) -> None:
        while not self._done.wait(WATCH_INTERVAL_S):
            with contextlib.suppress(OSError):
                if self.path.stat().st_size >= self.max_bytes:
                    self._at_max = True
                    self._signal(signal.SIGTERM)
                    return

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)

    def _last_error_line(self) -> str:
        lines = [ln for ln in self._stderr if ln.strip() and "listening on" not in ln]
        return lines[-1] if lines else ""

    def stop(self) -> dict[str, Any]:
        """SIGTERM, wait up to STOP_TIMEOUT_S, SIGKILL; returns the meta/capture.json doc.
        Calling it again returns the same doc."""
        if self._doc is not None:
            return self._doc
        self._done.set()
        proc = self._proc
        if proc is None and self.started_at is None:
            self.error = "not started: the run ended before its container started"
        if proc is not None:
            if proc.poll() is None:
                self.stopped_by = "sigterm"
                self._signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.stopped_by = "sigkill"
                    self._signal(signal.SIGKILL)
                    proc.wait(timeout=STOP_TIMEOUT_S)
            elif self._at_max:
                self.stopped_by = "max_bytes"
            else:
                self.stopped_by = "exited"
                if self.error is None:
                    self.error = f"tcpdump exited during the run with code {proc.returncode}: " + (
                        self._last_error_line() or "no message"
                    )
            if self._at_max:
                self.stopped_by = "max_bytes"
            self.exit_code = proc.returncode
            if self._reader is not None:
                self._reader.join(timeout=2)
            if proc.stderr is not None and (self._reader is None or not self._reader.is_alive()):
                proc.stderr.close()
        self.stopped_at = _now()
        self._doc = self._document()
        return self._doc

    def _document(self) -> dict[str, Any]:
        stderr = "\n".join(self._stderr)
        stats = parse_tcpdump_stats(stderr)
        size = None
        with contextlib.suppress(OSError):
            size = self.path.stat().st_size
        return {
            "format": FORMAT,
            "version": VERSION,
            "enabled": True,
            "interface": self.interface,
            "file": None,  # the bundle member, set by the runner once the file is in place
            "bytes": size,
            "snaplen": self.snaplen,
            "max_bytes": self.max_bytes,
            "truncated_at_max_bytes": self._at_max,
            "command": self.command,
            "started_at": self.started_at,
            "stopped_at": self.stopped_at,
            "stopped_by": self.stopped_by,
            "exit_code": self.exit_code,
            "stats": asdict(stats) if stats is not None else None,
            "error": self.error,
            "tcpdump_stderr": stderr[-_STDERR_KEEP:],
        }


def disabled_document(interface: str) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "enabled": False, "interface": interface,
            "file": None}

