"""What bringing a database to head takes (orchestrator.store.migrate.step_to_head):
Alembic only for a database at an older revision."""

from __future__ import annotations

from orchestrator.store.migrate import HEAD, Step, step_to_head


def test_an_empty_database_is_made_at_head_in_one_step() -> None:
    assert step_to_head(set(), []) is Step.CREATE


def test_a_database_at_head_is_left_alone() -> None:
    assert step_to_head({"runs", "alembic_version"}, [HEAD]) is Step.NOTHING


def test_an_older_database_is_migrated() -> None:
    assert step_to_head({"runs", "alembic_version"}, ["0003"]) is Step.MIGRATE


def test_tables_without_a_revision_go_to_alembic_which_says_what_is_wrong() -> None:
    assert step_to_head({"runs"}, []) is Step.MIGRATE
    assert step_to_head({"alembic_version"}, []) is Step.MIGRATE
