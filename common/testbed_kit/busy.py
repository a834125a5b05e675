"""Waiting for a free receiver on the shared measurement server.

The server runs a fixed set of single-session receivers (iperf3 on 5201-5208, ABw on
7351-7354), shared by every node of the fleet. A fleet's sessions start together (the
planner books them into the same windows), so all of one kind can be busy at once for
a few seconds: a run then waits for one to free up instead of failing its session. The
client tries the ports in turn, and after a round in which every port answered busy
pauses and tries again, for a bounded number of rounds (each round's pause is short
against an ABw estimate of ~1 s or a TAT of 10 s, and the rounds together fit the
head-room the manifests book for set-up).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

#: Rounds over all ports while every one answers busy, and the pause between rounds.
BUSY_ROUNDS = 4
BUSY_PAUSE_S = 2.0


def busy_rounds(ports: Iterable[int], *, rounds: int = BUSY_ROUNDS,
                pause_s: float = BUSY_PAUSE_S,
                sleep: Callable[[float], None] = time.sleep) -> Iterator[int]:
    """Each port in turn, ``rounds`` times, pausing ``pause_s`` between rounds. The
    caller stops iterating when a port serves it; running out means all stayed busy."""
    order = tuple(ports)
    for round_no in range(rounds):
        if round_no:
            sleep(pause_s)
        yield from order
