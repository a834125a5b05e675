"""Where the server's time goes when it stores a day of bookings: the planner bench's
``FLOOR_SQL`` (runs, and before migration 0016 their events, made by ``INSERT ...
SELECT`` in the server, no client work) under ``EXPLAIN (ANALYZE, WAL)``, on the schema
at the migrations' head and with one foreign key, one index or one change taken away at
a time (and the text keys in the C collation; and all keys and indexes but the primary
key gone: the bare table).

Each variant runs in a fresh copy (``CREATE DATABASE ... TEMPLATE``) of one database
that holds the nodes and the campaign, so no variant inherits another's dead rows. The
foreign keys' cost is what ``EXPLAIN ANALYZE`` reports per constraint trigger; an
index's is the difference it makes to the insert's time (indexes are maintained inside
the insert node, not reported apart).

    .venv/bin/python bench/planner_floor.py --nodes 2000     # 144,000 runs
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

RUNS_PER_NODE = 72  # a day of hourly sessions on 3 SIMs


def _statements() -> list[str]:
    """The runs' statement, then the events' where the schema stores one per run (it
    did before migration 0016)."""
    from planner import FLOOR_SQL  # type: ignore[import-not-found]

    return FLOOR_SQL.split(";\n")


def _names(cur: Any) -> tuple[list[str], list[str]]:
    """The runs table's foreign keys and its indexes other than the primary key."""
    cur.execute("SELECT conname FROM pg_constraint WHERE conrelid = 'runs'::regclass "
                "AND contype = 'f' ORDER BY conname")
    fks = [r[0] for r in cur.fetchall()]
    cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'runs' "
                "AND indexname <> 'runs_pkey' ORDER BY indexname")
    return fks, [r[0] for r in cur.fetchall()]


def _explain(cur: Any, sql: str, params: dict[str, Any]) -> dict[str, Any]:
    cur.execute("EXPLAIN (ANALYZE, WAL, BUFFERS, FORMAT JSON) " + sql, params)
    out = cur.fetchone()[0][0]
    plan = out["Plan"]
    return {
        "ms": out["Execution Time"],
        "insert_ms": plan["Actual Total Time"],
        "trigger_names": [t.get("Constraint Name", t["Trigger Name"])
                          for t in out.get("Triggers", [])],
        "trigger_ms": [round(t["Time"]) for t in out.get("Triggers", [])],
        "wal_mb": plan.get("WAL Bytes", 0) / 1e6,
        "wal_fpi": plan.get("WAL FPI", 0),
    }


def variant(admin: Any, template: str, base: str, name: str, ddl: list[str],
            params: dict[str, Any], *, events: bool = True) -> dict[str, Any]:
    import psycopg

    admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{base}"')
    url = template.format(db=name).replace("postgresql+psycopg://", "postgresql://")
    runs_sql, *events_sql = _statements()
    try:
        with psycopg.connect(url) as conn, conn.cursor() as cur:
            for d in ddl:
                cur.execute(d)
            conn.commit()
            cur.execute("CHECKPOINT")
            t0 = time.perf_counter()
            runs = _explain(cur, runs_sql, params)
            got = _explain(cur, events_sql[0], params) if events and events_sql else None
            conn.commit()
            wall = time.perf_counter() - t0
    finally:
        admin.execute(f'DROP DATABASE "{name}"')
    return {"wall_s": wall, "runs": runs, "events": got}


def main() -> None:
    from planner import _database as database  # type: ignore[import-not-found]

    from tests.integration import postgres

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--only", action="append", help="run only variants named so")
    args = ap.parse_args()
    now = datetime(2026, 3, 1, tzinfo=UTC)
    params = {"now": now, "runs": RUNS_PER_NODE * args.nodes, "nodes": args.nodes}
    import psycopg

    print(f"# {params['runs']} runs on {args.nodes} nodes; load {os.getloadavg()}",
          flush=True)
    with postgres.server() as template:
        database(template, "base", [f"n{i:05d}" for i in range(args.nodes)], now)
        admin_url = template.format(db="postgres").replace("postgresql+psycopg://",
                                                           "postgresql://")
        with psycopg.connect(admin_url, autocommit=True) as admin:
            with psycopg.connect(template.format(db="base").replace(
                    "postgresql+psycopg://", "postgresql://")) as conn, conn.cursor() as cur:
                fks, indexes = _names(cur)
            variants: list[tuple[str, list[str]]] = [("as is", [])]
            variants += [(f"without {fk}", [f'ALTER TABLE runs DROP CONSTRAINT "{fk}"'])
                         for fk in fks]
            variants += [(f"without {ix}", [f'DROP INDEX "{ix}"']) for ix in indexes]
            if len(_statements()) > 1:
                variants.append(("no events", []))
            variants.append(("C collation on the runs' text keys", [
                f"ALTER TABLE runs ALTER COLUMN {c} TYPE varchar({n}) COLLATE \"C\""
                for c, n in [("id", 40), ("campaign_id", 40), ("node_id", 64),
                             ("interface", 16), ("state", 16)]]))
            variants.append(("bare: no fk, no index but the key",
                             [f'ALTER TABLE runs DROP CONSTRAINT "{fk}"' for fk in fks]
                             + [f'DROP INDEX "{ix}"' for ix in indexes]))
            for i, (name, ddl) in enumerate(variants):
                if args.only and name not in args.only:
                    continue
                got = {"variant": name, **variant(admin, template, "base", f"v{i}", ddl,
                                                  params, events=name != "no events")}
                print(json.dumps(got), flush=True)
    print(f"# load at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
