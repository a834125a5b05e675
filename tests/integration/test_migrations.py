"""The migrations from an empty database, on both engines: what every fresh install and
every test session runs (the API tests start from a copy of a database migrated once
per session, tests/integration/conftest.py), so it must build exactly the schema the
models in ``orchestrator.store.tables`` describe."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, text

from orchestrator.store.migrate import alembic_config, upgrade
from orchestrator.store.tables import Base


def test_migrating_an_empty_database_builds_the_models_schema_at_head(empty_url: str) -> None:
    upgrade(empty_url)
    upgrade(empty_url)  # a second start finds it at head and changes nothing
    head = ScriptDirectory.from_config(alembic_config(empty_url)).get_current_head()
    engine = create_engine(empty_url)
    try:
        with engine.connect() as c:
            versions = c.execute(text("SELECT version_num FROM alembic_version")).scalars()
            assert list(versions) == [head]
            context = MigrationContext.configure(c, opts={"compare_type": True})
            # Each difference names the table and column the migrations got wrong.
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()
