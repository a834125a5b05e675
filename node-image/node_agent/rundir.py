"""A run's directory on the node, which its bundle is built from: results/ (the
experiment's, and the node's capture), server/ (the server's capture), logs/ (the
container's output and the agent's own notes) and meta/ (run.json, the captures'
accounts, modem and GPS samples). Here: the run's outcome, meta/run.json, and the
agent's notes."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from node_agent import __version__
from node_agent.spec import RunSpec
from testbed_common.states import RunState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOutcome:
    state: RunState  # UPLOADING (exit 0), FAILED or CANCELLED
    reason: str
    exit_code: int | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    bytes_used: int = 0
    image_id: str | None = None
    counters_before: dict[str, dict[str, int]] = field(default_factory=dict)
    counters_after: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The run's effective limits and the peaks of its use (None: it never had a
    #: container).
    confinement: dict[str, Any] | None = None


def agent_note(run_dir: Path, line: str) -> None:
    """One line in the run's logs/agent.txt: what went wrong around the experiment
    (capture, backstop, copying results) without failing it. On a full disk the note
    goes to the agent's log instead."""
    logs = run_dir / "logs"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        with (logs / "agent.txt").open("a") as f:
            f.write(line.rstrip("\n") + "\n")
    except OSError as e:
        log.warning("%s: cannot write the note %r (%s)", run_dir.name, line, e.strerror or e)


def write_run_meta(spec: RunSpec, run_dir: Path, outcome: RunOutcome) -> None:
    """meta/run.json: the resolved configuration, the image, how the run ended and
    what it moved (the run's reproducible record)."""
    meta = run_dir / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": "testbed.run-meta",
        "version": 1,
        "run_config": spec.config_json(),
        "image": spec.image,
        "image_id": outcome.image_id,
        "exit_code": outcome.exit_code,
        "state": str(outcome.state),
        "reason": outcome.reason,
        "started_at": outcome.started_at.isoformat() if outcome.started_at else None,
        "ended_at": outcome.ended_at.isoformat() if outcome.ended_at else None,
        "interface": spec.interface,
        "bytes_used": outcome.bytes_used,
        "counters_before": outcome.counters_before,
        "counters_after": outcome.counters_after,
        "agent_version": __version__,
        # The node's clock offset the run used (node_agent.clock): the times above and
        # in results/ and meta/ are on the node's clock; ingest moves them by it.
        "clock": spec.clock.to_json() if spec.clock is not None else None,
        # What confined it: its limits (the manifest's, capped by the node's policy),
        # its capabilities, and the peaks of what it used of them.
        "confinement": (outcome.confinement if outcome.confinement is not None
                        else {**spec.limits.to_json(), "peak": {}}),
    }
    (meta / "run.json").write_text(json.dumps(doc, indent=2))
