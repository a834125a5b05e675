"""The agent's small state files (the assignment book, the SIM account, the clock
estimate), written one way.

Each is written atomically (a temp file, then a rename), so a crash leaves the old file
or the new one, never half of one. A write that fails (a full disk, a read-only state
volume) is logged and reported, never raised: the value in memory is still right, the
executor and the heartbeat must go on, and the next save writes it again. The agent's
spool and outbox are not state files: losing a write there loses data, and they say so
themselves (node_agent.spool, node_agent.outbox).
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import suppress
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def write_state(path: Path, doc: Any, *, what: str, indent: int | None = None) -> bool:
    """Write ``doc`` as JSON to ``path`` atomically; False (logged) when it could not be
    written, in which case ``path`` still holds the previous version, if any."""
    tmp = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc, indent=indent))
        os.replace(tmp, path)
    except OSError as e:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
        log.error("cannot save the %s to %s (%s); it is kept in memory and saved again "
                  "at the next change", what, path, e.strerror or e)
        return False
    return True
