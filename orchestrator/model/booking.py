"""A run's booking: its creation is its first transition (to ``scheduled``), so that
transition is derived from the run's own row, not stored again as an event.

Every run is booked once and never returns to ``scheduled`` (``testbed_common.states``),
so its history starts with the same fact its row already holds: when it was made
(``created_at``), what for and where (``not_before``, node, interface, and for the
planner's bookings the campaign session, step and repetition). Storing that fact a
second time, as a ``run_events`` row per run, was half the rows a day of bookings wrote
(720,000 at 10,000 nodes x 3 SIMs) and one truth that could drift from the other. The
reason is spelt here once: the writers store it as the booked run's current reason,
and the readers of a run's history derive its first entry from it.
"""

from __future__ import annotations

from datetime import datetime

#: Who books runs: the orchestrator itself (the planner's pass, or an ad-hoc request).
BOOKED_BY = "orchestrator"


def session_label(occurrence: datetime) -> str:
    """A campaign session as reasons name it (its start, to the minute)."""
    return f"{occurrence:%Y-%m-%d %H:%M}"


def planner_reason(at: str, node: str, interface: str, campaign: str, session: str,
                   step: int, repetition: int) -> str:
    """Why the planner booked a run: ``at`` its start (ISO), ``session`` its campaign
    session (:func:`session_label`). Strings in, so the day's writer can pass the
    spellings it formats once per distinct instant."""
    return (f"booked by the planner for {at} on {node}/{interface}: campaign {campaign!r}, "
            f"session {session}, step {step}, repetition {repetition}")


def adhoc_reason(at: datetime, node: str, interface: str) -> str:
    """Why an ad-hoc run request was booked."""
    return f"booked for {at.isoformat()} on {node}/{interface}"


def booked_reason(*, not_before: datetime, node: str, interface: str,
                  campaign: str | None, session: datetime | None, step: int | None,
                  repetition: int | None) -> str:
    """The reason a run was booked with, from its row: the planner's for a run of a
    campaign session, else the ad-hoc request's."""
    if (session is not None and campaign is not None and step is not None
            and repetition is not None):
        return planner_reason(not_before.isoformat(), node, interface, campaign,
                              session_label(session), step, repetition)
    return adhoc_reason(not_before, node, interface)
