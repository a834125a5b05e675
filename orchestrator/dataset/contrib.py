"""What a study contributes to an open-data release: tables of its measurements' points
(:class:`~.tables.PointTable`: which tags and fields, their types and units).

A release holds the core's tables (runs, the agent's samples, flows from captures, and
those of the formats the core still reads) and every installed study's, after the
core's point tables. Studies are found by entry point
(:mod:`orchestrator.catalogue.plugins`); a table whose name another table has is
refused at start, naming both.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from orchestrator.catalogue.plugins import Loaded, StudyLoadError, installed
from orchestrator.dataset import tables as T


def tables_of(studies: Iterable[Loaded]) -> tuple[T.PointTable, ...]:
    """The studies' release tables; refuses a name taken by the core or another study."""
    taken = {spec.name: "the core" for spec in T.TABLES}
    out: list[T.PointTable] = []
    for study in studies:
        value = getattr(study.study, "tables", ())
        for table in value if isinstance(value, tuple | list) else (value,):
            if not isinstance(table, T.PointTable):
                raise StudyLoadError(f"study {study.entry_point}: its tables must be "
                                     "PointTable objects (orchestrator.study.point_table)")
            if table.spec.name in taken:
                raise StudyLoadError(
                    f"release table {table.spec.name!r} of study {study.entry_point} "
                    f"({study.distribution}) is already {taken[table.spec.name]}'s; give "
                    "it another name, or uninstall one of them")
            taken[table.spec.name] = study.entry_point
            out.append(table)
    return tuple(out)


@cache
def point_tables() -> tuple[T.PointTable, ...]:
    """Every point table of a release: the core's, then the installed studies'."""
    return (*T.POINT_TABLES, *tables_of(installed()))


def release_tables() -> tuple[T.TableSpec, ...]:
    """Every table of a release, in the order its files and descriptor list them."""
    return (T.RUNS, *(t.spec for t in point_tables()), T.SESSIONS, T.FLOWS)
