"""What ``testbed run wait`` shows while it waits: pure functions from the runs (as the
API returns them) and the time to the lines to print.

Kept apart from the polling loop so that what a waiting person reads is tested without a
server, a terminal or a clock. Two forms: a block redrawn in place on a terminal, and
plain lines for logs (one per state change, a summary now and then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from orchestrator.model.durations import spoken
from testbed_common.states import FINAL_STATES, RunState

#: Life-cycle order, so the display reads from "not started" to "over".
_ORDER = [s.value for s in RunState]
FINAL = {s.value for s in FINAL_STATES}
#: In the plain form, a summary line at most this often (seconds), so logs stay short.
SUMMARY_EVERY_S = 15.0


def live_display(*, isatty: bool, term: str | None) -> bool:
    """Redraw in place only on a real terminal that understands cursor movement; pipes,
    files, ``docker exec`` without ``-t`` and ``TERM=dumb`` get plain lines."""
    return isatty and (term or "dumb") != "dumb"


def _at(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def slot(run: Mapping[str, Any], now: datetime) -> str:
    """Where ``now`` stands in the run's booked slot (``not_before`` .. ``deadline``)."""
    if run["state"] in FINAL:
        return "over"
    start, end = _at(run["not_before"]), _at(run["deadline"])
    if now < start:
        return f"slot starts in {spoken((start - now).total_seconds())}"
    if now < end:
        return f"{spoken((end - now).total_seconds())} left of its slot"
    return f"past its slot by {spoken((now - end).total_seconds())}"


def counts(runs: Sequence[Mapping[str, Any]]) -> str:
    """``2 running, 1 done`` in life-cycle order."""
    by: dict[str, int] = {}
    for r in runs:
        by[r["state"]] = by.get(r["state"], 0) + 1
    order = sorted(by, key=lambda s: _ORDER.index(s) if s in _ORDER else len(_ORDER))
    return ", ".join(f"{by[s]} {s}" for s in order)


def run_line(run: Mapping[str, Any], now: datetime) -> str:
    """One run: what, where, how long in its state, and its slot."""
    since = spoken((now - _at(run["state_at"])).total_seconds())
    return (f"{run['id']}  {run['node']}/{run['interface']}  {run['experiment']}  "
            f"{run['state']} for {since}, {slot(run, now)}")


def summary(runs: Sequence[Mapping[str, Any]], *, waited_s: float, timeout_s: float) -> str:
    """One line: how many runs in which state, how long waited, how long until giving up."""
    final = sum(1 for r in runs if r["state"] in FINAL)
    return (f"waited {spoken(waited_s)} (gives up in "
            f"{spoken(timeout_s - waited_s)}): {final} of {len(runs)} runs final; "
            f"{counts(runs)}")


def block(runs: Sequence[Mapping[str, Any]], now: datetime, *, waited_s: float,
          timeout_s: float) -> list[str]:
    """The terminal display: the summary, then the runs grouped by state in life-cycle
    order, each with its elapsed time and what is left of its slot."""
    lines = [summary(runs, waited_s=waited_s, timeout_s=timeout_s)]
    states = sorted({r["state"] for r in runs},
                    key=lambda s: _ORDER.index(s) if s in _ORDER else len(_ORDER))
    for state in states:
        group = [r for r in runs if r["state"] == state]
        lines.append(f"{state} ({len(group)})")
        lines.extend(f"  {run_line(r, now)}" for r in group)
    return lines


def changes(before: Mapping[str, str], runs: Sequence[Mapping[str, Any]],
            now: datetime) -> list[str]:
    """The plain form's news: one line per run whose state differs from ``before``
    (a run not seen before is news too), with its reason when it has one."""
    lines = []
    for r in runs:
        old = before.get(r["id"])
        if old == r["state"]:
            continue
        move = f"{old} -> {r['state']}" if old else r["state"]
        reason = f" ({r['reason']})" if r.get("reason") else ""
        lines.append(f"{r['id']} {r['node']}/{r['interface']} {r['experiment']}: "
                     f"{move}{reason}; {slot(r, now)}")
    return lines


def fit(lines: list[str], *, rows: int, columns: int) -> list[str]:
    """Cut the block to the terminal: a wrapped or scrolled-off line would make the
    cursor-up redraw land in the wrong place, so lines are cut to ``columns`` and the
    block to ``rows - 1`` lines, the last saying how many were left out."""
    cut = [ln if len(ln) <= columns else ln[: max(columns - 3, 0)] + "..." for ln in lines]
    room = max(rows - 1, 2)
    if len(cut) <= room:
        return cut
    return [*cut[: room - 1], f"... {len(cut) - room + 1} more lines (a larger terminal "
                              "shows them)"[:columns]]
