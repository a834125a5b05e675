"""The installed studies, found by entry point (group ``testbed.studies``).

A study ships as a Python package that names, in its own metadata, one object per study
under this group (``[project.entry-points."testbed.studies"]`` in its pyproject), as
pytest plug-ins are found. Loading is lazy and done once per process: nothing is
imported until a layer first asks for its contributions, so importing the core runs
no study's code. Each layer of the core takes from the loaded objects what it speaks
(ingest its readers, releases their tables, the pages their routes); the SDK
(:mod:`orchestrator.study`) checks the whole set at start and refuses conflicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, entry_points

GROUP = "testbed.studies"


class StudyLoadError(RuntimeError):
    """An installed study that cannot be loaded: the message names it, its package and
    what to do."""


@dataclass(frozen=True)
class Loaded:
    """One study as its entry point gave it."""

    entry_point: str  # name = module:attribute, as its package declares it
    distribution: str  # the package that declares it
    study: object


def _load(ep: EntryPoint) -> Loaded:
    dist = ep.dist.name if ep.dist is not None else "an unknown package"
    where = f"study {ep.name!r} ({ep.value}, declared by {dist})"
    try:
        obj = ep.load()
    except Exception as e:  # whatever its import raised: say which study and how to go on
        raise StudyLoadError(
            f"{where} failed to load: {e!r}. Fix or reinstall that package, or uninstall "
            f"it (pip uninstall {dist}) to start without it") from e
    if callable(obj) and not hasattr(obj, "formats"):
        try:
            obj = obj()
        except Exception as e:
            raise StudyLoadError(
                f"{where}: its factory raised {e!r}. Fix or uninstall {dist}") from e
    return Loaded(f"{ep.name} = {ep.value}", dist, obj)


@cache
def installed() -> tuple[Loaded, ...]:
    """Every installed study, in the order of their entry points' names (so that the
    core's output does not depend on the order packages were installed in)."""
    found = sorted(entry_points(group=GROUP), key=lambda ep: (ep.name, ep.value))
    return tuple(_load(ep) for ep in found)
