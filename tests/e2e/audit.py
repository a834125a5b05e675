"""The fault matrix's five figures, measured the same way for every row.

Issue 10 asks each fault row to report: results lost (must be 0), duplicate archives
(0), runs left in a non-final state after recovery (0), quota overrun bytes (0), and
charged against measured bytes (within 2 %). Each row's test calls :func:`audit` on the
runs it made once the fault has cleared, asserts :meth:`Audit.problems` is empty, and
records the figures with :func:`record` so ``docs/reliability.md``'s table is filled
from the last run (``bench/reliability-figures.json``), not typed by hand.

What counts, and why:

* *lost*: a run that is not ``done`` with an archived bundle whose bytes match the
  recorded checksum (downloaded and hashed here), or with no series tagged with the run
  in InfluxDB within :data:`INGEST_WAIT_S` of the audit. A run the row expects to fail
  for a stated reason is passed in ``expected_not_done`` and is not counted lost if it
  ended in a final state with that reason.
* *duplicates*: bundle files under the run's folder in the orchestrator's archive,
  beyond one.
* *non-final*: runs in any state outside :data:`FINAL`.
* *overrun*: the bytes the runs measured beyond their reservations (each run's
  ``overrun_bytes``, which the SIM's ``overrun`` in ``/api/v1/quotas`` sums over its
  period): the SIM's own figure would count an earlier test's runs on it as well.
* *charged vs measured*: per run the agent measured (done, or failed as expected with
  its bytes metered), ``|charged - measured| / measured``; the worst. A run expected to
  fail whose measurement is gone (its node died with it) has nothing to compare: it
  is charged its reservation, which the node's kernel quota held its traffic to (a
  charge over it would show as the SIM's overrun).

:meth:`Audit.explain` gives every run's story (its transitions, timestamped, with their
reasons), for the assertion message of a row that fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.conftest import REPO
from tests.e2e.conftest import FINAL, Fleet, story

#: Where the rows' figures go; docs/reliability.md's table is written from it.
FIGURES = REPO / "bench" / "reliability-figures.json"
ARCHIVE = "/var/lib/testbed/archive"
#: The largest charged/measured disagreement a row may show (issue 10: within 2 %).
CHARGE_TOLERANCE = 0.02


@dataclass
class Audit:
    runs: int
    lost: list[str] = field(default_factory=list)
    duplicates: dict[str, int] = field(default_factory=dict)
    non_final: dict[str, str] = field(default_factory=dict)
    overrun_bytes: int = 0
    #: Worst relative |charged - measured| / measured over the done runs.
    charge_error: float = 0.0
    charge_detail: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)
    #: Each run's story (:func:`tests.e2e.conftest.story`), in the order audited.
    stories: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """Every figure that breaks issue 10's bar, in words; empty when the row passes."""
        out = []
        if self.lost:
            out.append(f"results lost: {self.lost}")
        if self.duplicates:
            out.append(f"duplicate archives: {self.duplicates}")
        if self.non_final:
            out.append(f"runs left non-final: {self.non_final}")
        if self.overrun_bytes:
            out.append(f"quota overrun: {self.overrun_bytes} bytes")
        if self.charge_error > CHARGE_TOLERANCE:
            out.append(f"charged vs measured off by {self.charge_error:.1%}: "
                       f"{self.charge_detail}")
        return out

    def explain(self) -> str:
        """The problems, then every run's story: what a failed row's assertion shows."""
        return "\n".join([*self.problems(), *self.stories])

    def figures(self) -> dict[str, Any]:
        return {"runs": self.runs, "lost": len(self.lost),
                "duplicates": sum(self.duplicates.values()),
                "non_final": len(self.non_final), "overrun_bytes": self.overrun_bytes,
                "charge_error": round(self.charge_error, 4)}


def _archived_bundles(run_id: str) -> int:
    out = subprocess.run(
        ["docker", "exec", "testbed-orchestrator", "find", ARCHIVE, "-path",
         f"*/{run_id}/*", "-name", "bundle.tar.gz"],
        capture_output=True, text=True, check=True).stdout
    return len(out.split())


#: How long a done run's points may take to reach InfluxDB: ingest is a background pass
#: after archiving (every 2 s in the compose stack), not part of the upload.
INGEST_WAIT_S = 30.0


def _result_in_influx(fleet: Fleet, run_id: str) -> bool:
    # Every experiment's ingest tags its points with the run; which measurements it
    # writes depends on the experiment, so ask for any series carrying the tag.
    deadline = time.monotonic() + INGEST_WAIT_S
    while not fleet.influx(f"SHOW SERIES WHERE \"run\" = '{run_id}'"):
        if time.monotonic() > deadline:
            return False
        time.sleep(1)
    return True


def audit(fleet: Fleet, run_ids: Iterable[str], *,
          expected_not_done: Mapping[str, str] | None = None,
          check_influx: bool = True) -> Audit:
    """The five figures over ``run_ids`` (see the module docstring).

    ``expected_not_done`` maps a run id to a fragment of the reason it must have ended
    with if not ``done`` (a run the fault rightly prevented, said with its reason); one
    that ended done after all is audited as any done run.
    """
    expected = dict(expected_not_done or {})
    ids = list(run_ids)
    result = Audit(runs=len(ids))
    for run_id in ids:
        run: dict[str, Any] = fleet.get(f"/api/v1/runs/{run_id}")
        result.overrun_bytes += run.get("overrun_bytes") or 0
        result.stories.append(story(run))
        if run["state"] not in FINAL:
            result.non_final[run_id] = run["state"]
            continue
        copies = _archived_bundles(run_id)
        if copies > 1:
            result.duplicates[run_id] = copies - 1
        if run_id in expected and run["state"] != "done":  # done is no loss
            if expected[run_id] not in (run.get("reason") or ""):
                result.lost.append(f"{run_id} ({run['state']}: {run.get('reason')})")
            elif run.get("measured_bytes") is not None:
                _charge(result, run)
            continue
        if run["state"] != "done" or copies == 0 or not _bundle_intact(fleet, run):
            result.lost.append(f"{run_id} ({run['state']}: {run.get('reason')})")
            continue
        if check_influx and not _result_in_influx(fleet, run_id):
            result.lost.append(f"{run_id} (done, but no series of it in InfluxDB)")
        _charge(result, run)
    return result


def _charge(result: Audit, run: dict[str, Any]) -> None:
    """Fold one measured run's charged-vs-measured error into ``result``."""
    measured, charged = run.get("measured_bytes"), run.get("charged_bytes")
    result.charge_detail[run["id"]] = (measured, charged)
    if measured and charged is not None:
        error = abs(charged - measured) / measured
        result.charge_error = max(result.charge_error, error)
    else:
        result.charge_error = max(result.charge_error, 1.0)


def _bundle_intact(fleet: Fleet, run: dict[str, Any]) -> bool:
    r = fleet.http.get(f"/api/v1/runs/{run['id']}/bundle")
    return r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == run[
        "bundle_sha256"]


def record(row: int, name: str, result: Audit, **extra: Any) -> None:
    """Keep the row's figures (and what the row did, e.g. how long the partition lasted)
    in :data:`FIGURES`, for docs/reliability.md. Written only when the whole row passed,
    so the table never shows figures of a failed run as if they were the last result.
    ``extra["fault"]``, when given, is the table's words for what the row did."""
    if result.problems() or os.environ.get("TESTBED_RECORD_FIGURES", "1") == "0":
        return
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    data[str(row)] = {"name": name, **result.figures(), **extra,
                      "recorded": datetime.now(UTC).strftime("%Y-%m-%d")}
    FIGURES.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
