"""The polling loop of ``testbed run wait``: asks the API for the runs every few seconds
and shows progress on stderr (what to show is decided in ``progress``)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO

from orchestrator.cli import progress
from orchestrator.cli.client import ApiClient
from orchestrator.model.durations import spoken

POLL_S = 2.0


def wait(client: ApiClient, run_ids: tuple[str, ...], *, timeout_s: float,
         stream: TextIO | None = None, live: bool | None = None,
         sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic,
         now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> list[dict[str, Any]]:
    """Poll until every run is final or ``timeout_s`` has passed; return the runs as
    last seen. ``live`` (default: whether ``stream`` is a terminal) picks the redrawn
    block over plain lines; stdout stays free for the command's result. ``clock``
    measures the wait, ``now`` (wall time) places the runs in their booked slots."""
    out = stream if stream is not None else sys.stderr
    if live is None:
        live = progress.live_display(isatty=out.isatty(), term=os.environ.get("TERM"))
    started = clock()
    seen: dict[str, str] = {}
    drawn = 0  # lines of the live block on screen, to redraw over them
    last_summary = started
    while True:
        runs: list[dict[str, Any]] = [client.call("GET", f"/api/v1/runs/{r}")
                                      for r in run_ids]
        waited = clock() - started
        at = now()
        done = all(r["state"] in progress.FINAL for r in runs)
        timed_out = not done and waited >= timeout_s
        if live:
            size = shutil.get_terminal_size()
            lines = progress.fit(progress.block(runs, at, waited_s=waited, timeout_s=timeout_s),
                                 rows=size.lines, columns=size.columns)
            # cursor up over the old block, clear to the end of the screen, draw anew
            out.write((f"\x1b[{drawn}F\x1b[J" if drawn else "") + "\n".join(lines) + "\n")
            drawn = len(lines)
        else:
            for line in progress.changes(seen, runs, at):
                out.write(line + "\n")
            if done or timed_out or clock() - last_summary >= progress.SUMMARY_EVERY_S:
                out.write(progress.summary(runs, waited_s=waited, timeout_s=timeout_s)
                          + "\n")
                last_summary = clock()
        seen = {r["id"]: r["state"] for r in runs}
        if timed_out:
            out.write(f"gave up after {spoken(timeout_s)} (--timeout); "
                      "the runs go on: `testbed run show RUN` or wait again\n")
        out.flush()
        if done or timed_out:
            return runs
        sleep(POLL_S)
