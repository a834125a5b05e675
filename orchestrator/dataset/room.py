"""Whether a release fits on its disk (pure): the decision, apart from reading the disk.

A release is written on the orchestrator's volume, which in the compose stack and on a
cluster is also the raw archive's and the uploads' (docs/scale.md): a release that
filled it would make the nodes' uploads fail (507) until someone freed space, and a
node that cannot upload keeps its results on its own small disk. So a build keeps a
reserve free for them, refuses a release over a set size (a typo'd period of years, a
raw release of a month's captures), and says which setting to change or what to
release instead. The release's files are all known before the first is written (they
are made in memory), so the check is exact up to the file system's rounding, which
:func:`footprint` counts.
"""

from __future__ import annotations

from collections.abc import Iterable

#: The settings a message names (docs/open-data.md, "Disk space").
RESERVE_SETTING = "TESTBED_DATASETS__RESERVE_BYTES"
MAX_SETTING = "TESTBED_DATASETS__MAX_RELEASE_BYTES"
#: What a smaller release is, said once for every refusal.
SMALLER = ("release a shorter period (--from/--to or --daily; from_day/to_day or daily "
           "over the API) or without raw files (--raw; raw)")


def footprint(sizes: Iterable[int], *, block: int, folders: int) -> int:
    """Bytes the files of ``sizes`` take on a file system of ``block``-byte allocation
    units: each file rounded up to whole blocks, each folder one block."""
    return sum(-(-size // block) * block for size in sizes) + folders * block


def refusal(*, where: str, free: int, reserve: int, need: int = 0, size: int = 0,
            max_bytes: int | None = None) -> str | None:
    """Why a release of ``size`` bytes taking ``need`` bytes of the disk at ``where``
    (``free`` bytes free now) may not be written, or None when it may. With ``need``
    0, whether a build may start at all."""
    if max_bytes is not None and size > max_bytes:
        return (f"the release would be {size:,} bytes, over the largest a build writes "
                f"({max_bytes:,}, {MAX_SETTING}): {SMALLER}, or raise that setting")
    if free - need < reserve:
        said = (f"{where} has {free:,} bytes free, and {reserve:,} are kept free for the "
                f"archive and the nodes' uploads ({RESERVE_SETTING})")
        if not need:
            return f"{said}: free space on it and build again"
        return (f"{said}; the release needs {need:,} bytes there: free space on it, or "
                f"{SMALLER}, and build again")
    return None
