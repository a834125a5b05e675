"""The database's refusal to delete the rows runs name: nodes, campaigns and bundles.

The runs have no foreign keys to these parents (migration 0017: a key is a look-up per
row inserted); the parents are never deleted instead, and a trigger on each table says
so to anyone who tries. Migration 0017 made the triggers on existing databases; a new
database made at head gets the same statements (:mod:`orchestrator.store.migrate`).
"""

from __future__ import annotations

#: The tables whose rows runs name, by the runs' column that names them.
PARENTS = {"node_id": "nodes", "campaign_id": "campaigns", "bundle_sha256": "bundles"}
#: What the refusal says, with the table's name.
REFUSAL = ("rows of {table} are never deleted, runs name them (migration 0017); put a "
           "node in maintenance, cancel or delete a campaign through the API")
#: PostgreSQL's trigger function (SQLite's triggers raise by themselves).
FUNCTION = "refuse_deleting_run_parents"


def trigger_name(table: str) -> str:
    return f"{table}_kept_for_runs"


def create_statements(dialect: str) -> list[str]:
    """The SQL that makes the refusal on ``dialect`` ("postgresql" or "sqlite")."""
    if dialect == "postgresql":
        message = REFUSAL.format(table="' || TG_TABLE_NAME || '")
        return [
            f"CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation', MESSAGE = "
            f"'{message}'; END $$",
            *(f"CREATE TRIGGER {trigger_name(t)} BEFORE DELETE OR TRUNCATE ON {t} FOR EACH "
              f"STATEMENT EXECUTE FUNCTION {FUNCTION}()" for t in PARENTS.values()),
        ]
    return [f"CREATE TRIGGER {trigger_name(t)} BEFORE DELETE ON {t} "
            f"BEGIN SELECT RAISE(ABORT, '{REFUSAL.format(table=t)}'); END"
            for t in PARENTS.values()]


def drop_statements(dialect: str) -> list[str]:
    """The SQL that removes what :func:`create_statements` made."""
    postgres = dialect == "postgresql"
    drops = [f"DROP TRIGGER {trigger_name(t)}" + (f" ON {t}" if postgres else "")
             for t in PARENTS.values()]
    return [*drops, f"DROP FUNCTION {FUNCTION}()"] if postgres else drops
