"""What the agent owes the orchestrator, sent in order: state reports first (a run's
bundle waits until its reports are through), then bundles, oldest first. One pass;
the agent's sender loop paces the passes."""

from __future__ import annotations

import logging
from collections.abc import Callable

from node_agent.client import OrchestratorClient
from node_agent.errors import (
    NotFound,
    OrchestratorUnreachable,
    ProtocolError,
    Rejected,
    RunFinal,
    Unauthorized,
)
from node_agent.outbox import Outbox
from node_agent.spool import Spool
from node_agent.uploader import UploadApi, upload

log = logging.getLogger(__name__)


def send_pending(
    *, client: OrchestratorClient, uploads: UploadApi, outbox: Outbox, spool: Spool,
    chunk_bytes: int, on_final: Callable[[str], None],
) -> bool:
    """One pass over the outbox, then the spool; False when the orchestrator is away.
    ``on_final(run_id)``: the orchestrator holds that run final already."""
    try:
        flush_outbox(client, outbox, on_final=on_final)
        waiting = outbox.run_ids()
        for item in spool.pending():
            if item.run_id in waiting:
                continue  # its state reports go first
            upload(uploads, spool, item, chunk_bytes=chunk_bytes)
    except (OrchestratorUnreachable, Unauthorized, ProtocolError) as e:
        log.warning("cannot send to the orchestrator now (%s); will retry", e)
        return False
    except Exception:  # a bug must not stop uploads for good: retry, paced
        log.exception("unexpected error while sending; will retry")
        return False
    return True


def flush_outbox(client: OrchestratorClient, outbox: Outbox, *,
                 on_final: Callable[[str], None]) -> None:
    for item in outbox.pending():
        try:
            client.report_state(item.run_id, item.report)
        except RunFinal as e:
            log.warning("%s; not reporting it again", e)
            outbox.drop_run(item.run_id)
            on_final(item.run_id)
            continue
        except (NotFound, Rejected) as e:
            log.error("run %s: state report %s refused: %s", item.run_id,
                      item.report.state, e)
        outbox.remove(item)
