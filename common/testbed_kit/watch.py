"""A measurement client watched against its deadline.

A client (iperf3, ITGSend) that connected to a server which then went silent, or
never answered, would block its step, and the run, until the node agent kills the
container at the end of its slot, with no reason but "exceeded its time slot". Watched,
the step ends in bounded time with a reason the run can report: the process is killed
when it runs past its deadline, or when it has not been seen to start (its
connections to the server up) within a shorter limit.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

#: How often the process and its ``started`` test are looked at, seconds.
POLL_S = 0.2


@dataclass(frozen=True)
class Watched:
    """How a watched client process ended: its output, and why it was killed (None:
    it exited on its own, with ``returncode``)."""

    returncode: int
    stdout: str
    stderr: str
    killed: Literal["never_started", "timeout"] | None


def run_watched(proc: subprocess.Popen[str], *, timeout_s: float, started: Callable[[], bool],
                start_within_s: float) -> Watched:
    """Wait for a measurement client, killing it when it runs past ``timeout_s`` or when
    ``started`` (e.g. its connections to the server are up) has not been seen within
    ``start_within_s``: a server that accepted and then went silent, or never
    answered, must end the step with a reason, not hang it."""
    begun = time.monotonic()
    seen = False
    while True:
        try:
            stdout, stderr = proc.communicate(timeout=POLL_S)
            return Watched(proc.returncode, stdout or "", stderr or "", None)
        except subprocess.TimeoutExpired:
            pass
        elapsed = time.monotonic() - begun
        seen = seen or started()
        if elapsed > timeout_s or (not seen and elapsed > start_within_s):
            proc.kill()
            stdout, stderr = proc.communicate()
            return Watched(proc.returncode, stdout or "", stderr or "",
                           "timeout" if seen else "never_started")
