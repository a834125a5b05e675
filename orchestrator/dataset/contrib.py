"""What a study contributes to an open-data release: tables of its measurements' points
(:class:`~.tables.PointTable`: which tags and fields, their types and units, and their
place among the point tables) and tables made from those tables' rows
(:class:`~.tables.DerivedTable`).

A release holds the core's tables (runs, the agent's samples, flows from captures) and
every installed study's: point tables by their order, then derived tables, then flows.
Studies are found by entry point (:mod:`orchestrator.catalogue.plugins`); a table whose
name another table has is refused at start, naming both.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from orchestrator.catalogue.plugins import Loaded, StudyLoadError, installed
from orchestrator.dataset import tables as T


def tables_of(studies: Iterable[Loaded]) -> tuple[T.PointTable, ...]:
    """The studies' release tables; refuses a name taken by the core or another study."""
    return _tables(studies)[0]


def _tables(studies: Iterable[Loaded]) -> tuple[tuple[T.PointTable, ...],
                                                 tuple[T.DerivedTable, ...]]:
    taken = {spec.name: "the core" for spec in T.TABLES}
    out: list[T.PointTable] = []
    derived: list[T.DerivedTable] = []
    for study in studies:
        value = getattr(study.study, "tables", ())
        more = getattr(study.study, "derived", ())
        for table in (*(value if isinstance(value, tuple | list) else (value,)),
                      *(more if isinstance(more, tuple | list) else (more,))):
            if not isinstance(table, T.PointTable | T.DerivedTable):
                raise StudyLoadError(f"study {study.entry_point}: its tables must be "
                                     "PointTable objects (orchestrator.study.point_table) "
                                     "or DerivedTable objects")
            if table.spec.name in taken:
                raise StudyLoadError(
                    f"release table {table.spec.name!r} of study {study.entry_point} "
                    f"({study.distribution}) is already {taken[table.spec.name]}'s; give "
                    "it another name, or uninstall one of them")
            taken[table.spec.name] = study.entry_point
            if isinstance(table, T.PointTable):
                out.append(table)
            else:
                derived.append(table)
    return tuple(out), tuple(derived)


@cache
def point_tables() -> tuple[T.PointTable, ...]:
    """Every point table of a release, the core's and the installed studies', by their
    order (then the core's first, then the studies' in their entry points' order)."""
    return tuple(sorted((*T.POINT_TABLES, *tables_of(installed())), key=lambda t: t.order))


@cache
def derived_tables() -> tuple[T.DerivedTable, ...]:
    """The installed studies' tables made from other tables' rows."""
    return _tables(installed())[1]


def release_tables() -> tuple[T.TableSpec, ...]:
    """Every table of a release, in the order its files and descriptor list them."""
    return (T.RUNS, *(t.spec for t in point_tables()),
            *(t.spec for t in derived_tables()), T.FLOWS)
