"""A long schemathesis run against a real orchestrator: the figures of docs/security.md
(## Fuzzing). Same harness as tests/integration/test_fuzz_api.py, with a time budget per
credential (admin token, node token, no token) and rounds that repeat with new seeds
until the case count is reached.

    .venv/bin/python bench/fuzz_api.py --cases 50000 --seconds 300
    .venv/bin/python bench/fuzz_api.py --postgres --budget 600   # on PostgreSQL

Prints one line per round and a total: cases, server errors (5xx), response-schema
violations, other failures, duration and the machine's load average.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the real orchestrator process, as the tests start it
from tests.integration import fuzz, postgres  # noqa: E402
from tests.integration.live import orchestrator  # noqa: E402


@contextlib.contextmanager
def database(use_postgres: bool) -> Iterator[dict[str, str]]:
    """The orchestrator's environment for its database: SQLite (the default of
    ``orchestrator``) or a fresh PostgreSQL server, which refuses what SQLite takes
    (NUL in text, strings over their column's length)."""
    if not use_postgres:
        yield {}
        return
    why = postgres.available()
    if why:
        raise SystemExit(f"no PostgreSQL: {why}")
    with postgres.server() as template:
        yield {"TESTBED_DATABASE_URL": postgres.create_database(template, "fuzz")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=50_000, help="stop after this many cases")
    ap.add_argument("--seconds", type=int, default=300, help="time per credential per round")
    ap.add_argument("--budget", type=int, default=3600, help="stop after this many seconds")
    ap.add_argument("--postgres", action="store_true", help="on PostgreSQL, not SQLite")
    args = ap.parse_args()
    started = time.monotonic()
    totals = {"cases": 0, "5xx": 0, "schema": 0, "other": 0}
    with (tempfile.TemporaryDirectory() as tmp, database(args.postgres) as env,
          orchestrator(Path(tmp), **env) as live):
        creds = fuzz.credentials(live)
        round_no = 0
        while totals["cases"] < args.cases and time.monotonic() - started < args.budget:
            round_no += 1
            for name, token in creds.items():
                o = fuzz.run(live, credential=name, token=token, seconds=args.seconds,
                             workdir=Path(tmp), seed=round_no * 1000 + len(name))
                totals["cases"] += o.cases
                totals["5xx"] += o.server_errors
                totals["schema"] += o.schema_violations
                totals["other"] += len(o.other_failures)
                print(f"round {round_no} {name:5}: {o.cases} cases, {o.server_errors} 5xx, "
                      f"{o.schema_violations} schema violations, other {o.other_failures}, "
                      f"{o.seconds:.0f} s, load {os.getloadavg()[0]:.1f}", flush=True)
                if not o.clean:
                    print(o.output)
        traces = (Path(tmp) / "orchestrator.log").read_text().count("Traceback")
    elapsed = time.monotonic() - started
    print(f"total: {totals['cases']} cases, {totals['5xx']} 5xx, {totals['schema']} schema "
          f"violations, {totals['other']} other failures, {traces} tracebacks in the server "
          f"log, {elapsed:.0f} s, load {os.getloadavg()}")
    return 0 if totals["5xx"] == totals["schema"] == totals["other"] == traces == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
