"""State reports waiting to reach the orchestrator, on disk so they survive restarts.

Reports are sent in the order they were made (a run must be seen ``running`` before
``uploading``); one file per report, named by a sequence number, written atomically.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from testbed_common.wire import StateReport


@dataclass(frozen=True)
class PendingReport:
    path: Path
    run_id: str
    report: StateReport


class Outbox:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self._seq = max((self._seq_of(p) for p in root.glob("*.json")), default=0)

    @staticmethod
    def _seq_of(path: Path) -> int:
        try:
            return int(path.name.split("-", 1)[0])
        except ValueError:
            return 0

    def put(self, run_id: str, report: StateReport) -> None:
        self._seq += 1
        path = self.root / f"{self._seq:012d}-{run_id}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"run_id": run_id, "report": report.model_dump(mode="json")}))
        os.replace(tmp, path)

    def pending(self) -> list[PendingReport]:
        out = []
        for path in sorted(self.root.glob("*.json")):
            try:
                data = json.loads(path.read_text())
            except FileNotFoundError:  # delivered meanwhile by the sender's thread
                continue
            out.append(
                PendingReport(path, str(data["run_id"]), StateReport.model_validate(data["report"]))
            )
        return out

    def remove(self, item: PendingReport) -> None:
        item.path.unlink(missing_ok=True)

    def drop_run(self, run_id: str) -> None:
        """Forget every report of a run (it is final on the orchestrator already)."""
        for item in self.pending():
            if item.run_id == run_id:
                self.remove(item)

    def run_ids(self) -> set[str]:
        return {item.run_id for item in self.pending()}
