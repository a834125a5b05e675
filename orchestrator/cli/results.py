"""The columns of ``testbed results`` that the installed studies contribute
(:class:`orchestrator.study.ResultColumn`), merged by name, and a run's values of them.

The core's own columns say where and what a run was; what its result means (a rate, a
relative difference) is its study's, so the CLI shows what the installed studies give.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.catalogue.plugins import installed
from orchestrator.study import ResultColumn, StudyLoadError

#: The core's last column: the bytes the result says it moved (a study may give a
#: fallback for results that hold them elsewhere).
BYTES = "bytes"


def installed_columns() -> tuple[ResultColumn, ...]:
    """Every installed study's columns, in their entry points' order (read once per
    command: the CLI is a process per command)."""
    out: list[ResultColumn] = []
    for study in installed():
        value = getattr(study.study, "columns", ())
        for column in value if isinstance(value, tuple | list) else (value,):
            if not isinstance(column, ResultColumn):
                raise StudyLoadError(f"study {study.entry_point}: its columns must be "
                                     "ResultColumn objects (orchestrator.study.ResultColumn)")
            out.append(column)
    return tuple(out)


def study_headers(columns: Sequence[ResultColumn]) -> list[str]:
    """The studies' column names, each once, by their order (the core's ``bytes`` is
    not among them: it is the last column whatever the studies give)."""
    first: dict[str, int] = {}
    for c in columns:
        if c.name != BYTES:
            first[c.name] = min(first.get(c.name, c.order), c.order)
    return sorted(first, key=lambda name: (first[name], name))


def figures(result: Mapping[str, Any],
            columns: Sequence[ResultColumn]) -> dict[str, object]:
    """A run's value of each study column and of ``bytes``; ``-`` where none is given."""
    out: dict[str, object] = {}
    for name in (*study_headers(columns), BYTES):
        given = [c.value(result) for c in columns if c.name == name]
        if name == BYTES and BYTES in result:
            given.insert(0, result[BYTES])
        out[name] = next((v for v in given if v is not None), "-")
    return out
