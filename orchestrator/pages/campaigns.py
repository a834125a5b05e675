"""The campaigns page: every campaign's runs by state and the planner's decisions, so a
user sees in the browser what the API and the CLI say: which sessions were deferred,
skipped or rejected, and why ("deferred: SIM 240-01 on se-03 would reach 97% of its
monthly cap"). Its owner and administrators also get Cancel and Delete buttons (plain
POST forms; see :mod:`.routes`). Pure: summaries in, a :class:`~.views.Page` out."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.pages.views import Action, Page, Section, Table
from orchestrator.schemas import CampaignSummary, DecisionPublic
from testbed_common.states import RunState

#: Run states in life-cycle order, for the counts (the enum's order: one truth).
STATE_ORDER = tuple(s.value for s in RunState)


def _runs(counts: dict[str, int]) -> str:
    order = {s: i for i, s in enumerate(STATE_ORDER)}
    parts = [f"{n} {state}" for state, n in
             sorted(counts.items(), key=lambda kv: order.get(kv[0], len(order)))]
    return ", ".join(parts) if parts else "no runs booked"


def _where(d: DecisionPublic) -> str:
    if d.node and d.interface:
        return f"{d.node}/{d.interface}"
    return d.node or "-"


def _decisions(c: CampaignSummary) -> Table:
    return Table(
        caption=f"Decisions of the last planning pass ({len(c.decisions)})",
        headers=("Kind", "Code", "Where", "Sessions", "Reason"),
        rows=tuple((d.kind, d.code, _where(d), str(d.count), d.message)
                   for d in c.decisions),
        css_class="decisions")


def _actions(c: CampaignSummary, *, viewer: str, admin: bool) -> tuple[Action, ...]:
    if not (admin or c.owner == viewer):
        return ()
    delete = Action(f"/pages/campaigns/{c.id}/delete", f"Delete {c.id}")
    if c.cancelled_at is not None:
        return (delete,)
    return (Action(f"/pages/campaigns/{c.id}/cancel", f"Cancel {c.id}"), delete)


def campaigns_page(summaries: Sequence[CampaignSummary], *, viewer: str = "",
                   admin: bool = False) -> Page:
    """``viewer`` (a user name) sees buttons on the campaigns they own; ``admin`` on
    all."""
    sections = []
    for c in summaries:
        planned = c.planned_at.strftime("%Y-%m-%d %H:%M UTC") if c.planned_at else "never"
        text = (f"Project {c.project}, by {c.owner}; submitted "
                f"{c.created_at:%Y-%m-%d %H:%M} UTC, last planned {planned}. "
                f"Runs: {_runs(c.runs)}.")
        if c.cancelled_at is not None:
            text += (f" Cancelled at {c.cancelled_at:%Y-%m-%d %H:%M} UTC "
                     f"({c.cancel_reason}): no longer planned.")
        elif not c.decisions:
            text += " Every session it asked for is booked."
        sections.append(Section(heading=f"{c.name} ({c.id})", text=text,
                                tables=(_decisions(c),) if c.decisions else (),
                                actions=_actions(c, viewer=viewer, admin=admin)))
    return Page(
        "campaigns", "Campaigns",
        "The newest campaigns first. Decisions say what the planner could not book and "
        "why: deferred (may run after a re-plan: a node comes back, a quota resets), "
        "skipped (that occurrence will not run) or rejected (fix the spec or the quota).",
        sections=tuple(sections),
        empty=None if summaries else
        "No campaigns yet: submit one with `testbed campaign submit FILE`.",
        filterable=False)
