"""Where the orchestrator's own log lines go when it serves.

Without a handler, Python prints only warnings and errors (bare, through its last-resort
handler), so an operator reading ``docker logs`` saw none of what the orchestrator says
at ``INFO``: which nodes the fleet file made, the loops' lease taken or lost, the runs
the reaper ended, what ingest wrote, how long the start took. uvicorn configures only
its own loggers. The format is the node agent's, so both read alike side by side."""

from __future__ import annotations

import logging
import os
import sys

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure() -> None:
    """Log the orchestrator's lines at ``TESTBED_LOG_LEVEL`` (default ``INFO``) on
    stderr. Called by ``testbed serve`` and by each worker process it starts."""
    level = os.environ.get("TESTBED_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(level=level, format=FORMAT, stream=sys.stderr)
    # httpx says every request at INFO: each write of ingest to InfluxDB, every 2 s in
    # the compose stack. Kept for DEBUG.
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("httpx").setLevel(logging.WARNING)
