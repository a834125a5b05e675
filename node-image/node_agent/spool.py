"""Result bundles on disk waiting for upload ("offline nodes keep measuring and upload
later"). One ``<run_id>.tar.gz`` plus a ``<run_id>.json`` with its size and SHA-256 per
run, written atomically; bundles the orchestrator refuses move to ``rejected/`` with the
reason beside them: data is never deleted until the orchestrator holds it.

The spool is never trimmed: nothing here (or anywhere in the agent) deletes a bundle to
make room. A bundle leaves the spool only by :meth:`Spool.done` (the orchestrator
confirmed it holds it) or :meth:`Spool.reject` (refused for good: kept in rejected/).
When the disk is too full for the next run, that run is refused instead
(:mod:`node_agent.diskspace`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from testbed_common.bundle import sha256_bytes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpooledBundle:
    run_id: str
    path: Path
    size: int
    sha256: str


class Spool:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.rejected_dir = root.parent / "rejected"
        root.mkdir(parents=True, exist_ok=True)

    def put(self, run_id: str, data: bytes) -> SpooledBundle:
        bundle = self.root / f"{run_id}.tar.gz"
        meta = self.root / f"{run_id}.json"
        item = SpooledBundle(run_id, bundle, len(data), sha256_bytes(data))
        tmp = bundle.with_suffix(".part")
        tmp.write_bytes(data)
        os.replace(tmp, bundle)
        # The metadata file goes last: a bundle without it is incomplete and ignored.
        tmp_meta = meta.with_suffix(".part")
        tmp_meta.write_text(
            json.dumps({"run_id": run_id, "size": item.size, "sha256": item.sha256})
        )
        os.replace(tmp_meta, meta)
        return item

    def pending(self) -> list[SpooledBundle]:
        """Complete bundles, oldest first: in the order they were spooled (their
        metadata file's modification time, then the run id), so the runs an outage held
        back go up in the order they ran. A bundle whose metadata is missing (a
        :meth:`put` the disk cut short) is not complete and never listed; one whose
        metadata cannot be read is logged and left where it is."""
        items = []
        metas = []
        for meta in self.root.glob("*.json"):
            try:
                metas.append((meta.stat().st_mtime_ns, meta.name, meta))
            except FileNotFoundError:  # uploaded meanwhile
                continue
        for _, _, meta in sorted(metas):
            try:
                data = json.loads(meta.read_text())
                item = SpooledBundle(str(data["run_id"]), self.root / f"{data['run_id']}.tar.gz",
                                     int(data["size"]), str(data["sha256"]))
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.error("spool: cannot read %s (%s); that bundle is kept but not sent",
                          meta, e)
                continue
            if item.path.exists():
                items.append(item)
        return items

    def run_ids(self) -> set[str]:
        return {item.run_id for item in self.pending()}

    def __len__(self) -> int:
        return len(self.pending())

    def discard(self, run_id: str) -> None:
        """Remove what a failed :meth:`put` left half written (the temporary files and
        a bundle without its metadata), so the space it took is free again."""
        bundle, meta = self.root / f"{run_id}.tar.gz", self.root / f"{run_id}.json"
        for path in (bundle.with_suffix(".part"), meta.with_suffix(".part")):
            path.unlink(missing_ok=True)
        if not meta.exists():  # a complete bundle (with its metadata) is never removed
            bundle.unlink(missing_ok=True)

    def done(self, item: SpooledBundle) -> None:
        """The orchestrator holds the bundle: free the space."""
        item.path.unlink(missing_ok=True)
        (self.root / f"{item.run_id}.json").unlink(missing_ok=True)

    def reject(self, item: SpooledBundle, reason: str) -> Path:
        """Keep a refused bundle (never delete data) with the reason next to it."""
        self.rejected_dir.mkdir(parents=True, exist_ok=True)
        target = self.rejected_dir / item.path.name
        shutil.move(str(item.path), target)
        (self.rejected_dir / f"{item.run_id}.reason.txt").write_text(reason + "\n")
        (self.root / f"{item.run_id}.json").unlink(missing_ok=True)
        return target
