"""Out of contact is not failure: what a silent node means for the runs it holds.

Mobile nodes (buses, trains, rural sites) lose their control link for minutes to hours.
The agent goes on measuring offline and spools the bundle, so a run whose node falls
silent is ``unreachable``, not failed: its reservation stays held, its bundle is still
awaited. Only a silence longer than a horizon (days) fails it. These are the decisions
and the words for them; the reaper and the upload service apply them. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from testbed_common.states import RunState

#: Runs that go ``unreachable`` when their node falls silent: the node took them up
#: and may finish them offline. (An assigned run not yet deployed fails as before: the
#: node's offline schedule is a separate matter.)
KEPT_THROUGH_SILENCE = frozenset({RunState.DEPLOYING, RunState.RUNNING})


def fmt_span(seconds: float) -> str:
    """A duration as people say it: "40 s", "1 min 40 s", "2 h 5 min", "7 days"."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        m, rest = divmod(s, 60)
        return f"{m} min {rest} s" if rest else f"{m} min"
    if s < 86400:
        h, rest = divmod(s, 3600)
        m = rest // 60
        return f"{h} h {m} min" if m else f"{h} h"
    d, rest = divmod(s, 86400)
    h = rest // 3600
    days = f"{d} day" + ("s" if d != 1 else "")
    return f"{days} {h} h" if h else days


class Silence(StrEnum):
    """What the reaper does with an active run of a node, given the node's silence."""

    KEEP = "keep"  # the node is heard from, or the run waits as unreachable
    UNREACHABLE = "unreachable"  # the node just fell silent: keep the run, mark it
    FAIL = "fail"  # silent while holding a run it had not taken up, or past the horizon


@dataclass(frozen=True)
class Horizon:
    """How long an unreachable run waits for word from its node."""

    seconds: float

    def passed(self, *, silent_since: datetime, now: datetime) -> bool:
        return now - silent_since >= timedelta(seconds=self.seconds)


def on_silence(state: RunState, *, node_offline: bool, silent_since: datetime | None,
               now: datetime, horizon: Horizon) -> Silence:
    """The reaper's decision for one run of a node (see the module docstring)."""
    if state == RunState.UNREACHABLE:
        if silent_since is not None and horizon.passed(silent_since=silent_since, now=now):
            return Silence.FAIL
        return Silence.KEEP
    if not node_offline:
        return Silence.KEEP
    return Silence.UNREACHABLE if state in KEPT_THROUGH_SILENCE else Silence.FAIL


def unreachable_reason(node_id: str, *, last_heard: str, horizon: Horizon) -> str:
    return (f"node {node_id} fell silent while holding the run (last heartbeat {last_heard}); "
            "the run is kept: the node may finish it offline and upload its bundle when back; "
            f"it fails after {fmt_span(horizon.seconds)} without word")


def horizon_reason(node_id: str, *, silent_since: datetime, horizon: Horizon) -> str:
    return (f"no word from node {node_id} for {fmt_span(horizon.seconds)} since "
            f"{silent_since.isoformat()}; the whole reservation stays charged")


def out_of_contact_note(node_id: str, seconds: float | None) -> str | None:
    """The note a run carries when its node was out of contact during it, else None."""
    if not seconds:
        return None
    return f"node {node_id} out of contact for {fmt_span(seconds)} during the run"
