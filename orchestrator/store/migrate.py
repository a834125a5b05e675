"""Schema migrations (Alembic), run programmatically so the package needs no ini file."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, pool

from orchestrator.store import locks

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Apply the migrations. Every replica does at start: on PostgreSQL under an
    advisory lock, so replicas starting together apply them one after the other (the
    second finds the schema at head and does nothing) instead of racing to create the
    same tables."""
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        if not locks.shared_locks(engine):
            command.upgrade(alembic_config(url), revision)
            return
        with locks.held(engine, locks.MIGRATIONS):
            command.upgrade(alembic_config(url), revision)
    finally:
        engine.dispose()
