"""Schema migrations (Alembic), run programmatically so the package needs no ini file.

Every orchestrator replica brings its database to head when it starts. Most starts find
it there already, and a new installation finds it empty: neither needs Alembic. A
database at :data:`HEAD` is left as it is after one query; an empty one gets the schema
the models describe in one step (:func:`create_at_head`), recorded at :data:`HEAD` as
Alembic records it, instead of replaying every migration since the first. Only a
database at an older revision is migrated by Alembic. On a warm ``scripts/up`` that was
about a second of the first replica's start: Alembic's import and sixteen migrations,
while the nodes waited for the replica to answer (bench/RESULTS.md). The two ways to
head make the same schema, checked in tests/integration/test_migrations.py.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    create_engine,
    inspect,
    pool,
    select,
)

from orchestrator.store import guards, locks
from orchestrator.store.tables import Base

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
#: The newest migration's revision, the schema :mod:`orchestrator.store.tables`
#: describes. A new migration moves it (tests/integration/test_migrations.py fails
#: until it does).
HEAD = "0017"
#: Alembic's record of a database's revision, as Alembic makes it.
VERSION_TABLE = Table(
    "alembic_version", MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)


class Step(Enum):
    """What bringing a database to head takes."""

    NOTHING = "at head"
    CREATE = "empty: made at head in one step"
    MIGRATE = "migrated by Alembic"


def step_to_head(tables: set[str], revisions: list[str]) -> Step:
    """Pure: the step for a database with these ``tables`` whose version table holds
    ``revisions``. Anything but an empty database or one at :data:`HEAD` (an older
    revision, tables without a version) goes to Alembic, which says what is wrong."""
    if not tables:
        return Step.CREATE
    if revisions == [HEAD]:
        return Step.NOTHING
    return Step.MIGRATE


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head", *, replay: bool = False) -> None:
    """Bring the database at ``url`` to ``revision``. Every replica does at start: on
    PostgreSQL under an advisory lock, so replicas starting together take their turns
    (the second finds the schema at head and does nothing) instead of racing to create
    the same tables. To head, an empty database is made at head in one step unless
    ``replay`` (every migration from the first, as the tests of the migrations want)."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        if not locks.shared_locks(engine):
            _upgrade(engine, url, revision, replay)
            return
        with locks.held(engine, locks.MIGRATIONS):
            _upgrade(engine, url, revision, replay)
    finally:
        engine.dispose()


def _upgrade(engine: Engine, url: str, revision: str, replay: bool) -> None:
    if revision == "head" and not replay:
        with engine.begin() as c:
            step = step_to_head(set(inspect(c).get_table_names()), _revisions(c))
            if step is Step.CREATE:
                create_at_head(c)
        if step is not Step.MIGRATE:
            return
    from alembic import command  # its import alone is a third of a second

    command.upgrade(alembic_config(url), revision)


def _revisions(c: Connection) -> list[str]:
    if not inspect(c).has_table(VERSION_TABLE.name):
        return []
    return list(c.execute(select(VERSION_TABLE.c.version_num)).scalars())


def create_at_head(c: Connection) -> None:
    """Make the schema at :data:`HEAD` in an empty database: the models' tables, what
    migrations made beyond them (the refusal to delete runs' parents,
    :mod:`orchestrator.store.guards`), and Alembic's record of the revision."""
    Base.metadata.create_all(c)
    for statement in guards.create_statements(c.dialect.name):
        c.exec_driver_sql(statement)
    VERSION_TABLE.create(c)
    c.execute(VERSION_TABLE.insert().values(version_num=HEAD))
