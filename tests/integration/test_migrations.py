"""The migrations from an empty database, on both engines, and the one step that makes
a new database at head instead (orchestrator.store.migrate): every fresh install takes
that step and every older database the migrations, so both must build exactly the
schema the models in ``orchestrator.store.tables`` describe, and the same one."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, create_engine, inspect, text

from orchestrator.store.migrate import HEAD, alembic_config, upgrade
from orchestrator.store.tables import Base
from tests.integration import postgres


def _versions(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return list(c.execute(text("SELECT version_num FROM alembic_version")).scalars())
    finally:
        engine.dispose()


def test_migrating_an_empty_database_builds_the_models_schema_at_head(empty_url: str) -> None:
    upgrade(empty_url, replay=True)
    upgrade(empty_url)  # a second start finds it at head and changes nothing
    assert _versions(empty_url) == [HEAD]
    engine = create_engine(empty_url)
    try:
        with engine.connect() as c:
            context = MigrationContext.configure(c, opts={"compare_type": True})
            # Each difference names the table and column the migrations got wrong.
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_head_is_the_newest_migration() -> None:
    """A new migration moves orchestrator.store.migrate.HEAD; until it does, a database
    made at head would be recorded at the older revision and migrated once more."""
    assert ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head() == HEAD


def _rows(c: Connection, sql: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in c.execute(text(sql)))


def _schema(url: str) -> dict[str, Any]:
    """Everything a database's schema says, by table, in no particular order of
    columns: the types, defaults, keys, indexes, constraints and triggers (and on
    PostgreSQL the functions), and the revision recorded."""
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            insp = inspect(c)
            tables: dict[str, Any] = {}
            for name in insp.get_table_names():
                tables[name] = {
                    "columns": sorted(
                        (col["name"], str(col["type"]), col["nullable"], str(col.get("default")))
                        for col in insp.get_columns(name)),
                    "primary key": insp.get_pk_constraint(name)["constrained_columns"],
                    "foreign keys": sorted(
                        (tuple(fk["constrained_columns"]), fk["referred_table"],
                         tuple(fk["referred_columns"]), str(fk.get("options")))
                        for fk in insp.get_foreign_keys(name)),
                    "indexes": sorted(
                        (ix["name"], tuple(ix["column_names"]), bool(ix["unique"]))
                        for ix in insp.get_indexes(name)),
                    "unique": sorted(tuple(u["column_names"])
                                     for u in insp.get_unique_constraints(name)),
                    "checks": sorted(str(ck["sqltext"]) for ck in insp.get_check_constraints(name)),
                }
            if c.dialect.name == "postgresql":
                triggers = _rows(c, "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger "
                                    "WHERE NOT tgisinternal")
                functions = _rows(c, "SELECT proname, prosrc FROM pg_proc p JOIN pg_namespace n "
                                     "ON n.oid = p.pronamespace WHERE n.nspname = 'public'")
            else:
                triggers = _rows(c, "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
                functions = []
            versions = list(c.execute(text("SELECT version_num FROM alembic_version")).scalars())
        return {"tables": tables, "triggers": triggers, "functions": functions,
                "versions": versions}
    finally:
        engine.dispose()


def test_a_new_database_made_at_head_is_the_migrated_one(
        empty_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if empty_url.startswith("sqlite"):
        migrated = f"sqlite:///{tmp_path / 'migrated.db'}"
    else:
        migrated = postgres.create_database(request.getfixturevalue("postgres_url"),
                                            f"m_{uuid.uuid4().hex[:12]}")
    upgrade(empty_url)  # an empty database: made at head in one step
    upgrade(migrated, replay=True)
    made, replayed = _schema(empty_url), _schema(migrated)
    assert made["versions"] == [HEAD]
    assert made["triggers"], "the refusal to delete runs' parents is missing"
    # Table by table, so that a difference names its table.
    assert sorted(made["tables"]) == sorted(replayed["tables"])
    for table in made["tables"]:
        assert made["tables"][table] == replayed["tables"][table], table
    assert made == replayed
