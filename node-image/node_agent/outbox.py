"""State reports waiting to reach the orchestrator, on disk so they survive restarts.

Reports are sent in the order they were made (a run must be seen ``running`` before
``uploading``); one file per report, named by a sequence number, written atomically.
A report that cannot be written (the disk is full) is kept in memory in its place in
the order: a run's end must reach the orchestrator even when the node's disk filled
during it (only a restart before it is sent loses it).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from testbed_common.wire import StateReport

log = logging.getLogger(__name__)


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
        #: Reports the disk had no room for, by the path they would have had.
        self._unsaved: dict[Path, PendingReport] = {}
        self._unsaved_lock = threading.Lock()

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
        try:
            tmp.write_text(
                json.dumps({"run_id": run_id, "report": report.model_dump(mode="json")}))
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            log.error("run %s: cannot write the %s report to %s (%s); keeping it in memory "
                      "until sent", run_id, report.state, self.root, e.strerror or e)
            with self._unsaved_lock:
                self._unsaved[path] = PendingReport(path, run_id, report)

    def pending(self) -> list[PendingReport]:
        out = []
        for path in self.root.glob("*.json"):
            try:
                data = json.loads(path.read_text())
            except FileNotFoundError:  # delivered meanwhile by the sender's thread
                continue
            out.append(
                PendingReport(path, str(data["run_id"]), StateReport.model_validate(data["report"]))
            )
        with self._unsaved_lock:
            out.extend(self._unsaved.values())
        return sorted(out, key=lambda item: item.path.name)

    def remove(self, item: PendingReport) -> None:
        item.path.unlink(missing_ok=True)
        with self._unsaved_lock:
            self._unsaved.pop(item.path, None)

    def drop_run(self, run_id: str) -> None:
        """Forget every report of a run (it is final on the orchestrator already)."""
        for item in self.pending():
            if item.run_id == run_id:
                self.remove(item)

    def run_ids(self) -> set[str]:
        return {item.run_id for item in self.pending()}
