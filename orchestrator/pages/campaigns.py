"""The campaigns page: every campaign's runs by state and the planner's decisions, so a
user sees in the browser what the API and the CLI say: which sessions were deferred,
skipped or rejected, and why ("deferred: SIM 240-01 on se-03 would reach 97% of its
monthly cap"). Pure: summaries in, a :class:`~.views.Page` out."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.pages.views import Page, Section, Table
from orchestrator.schemas import CampaignSummary, DecisionPublic

#: Run states in life-cycle order, for the counts.
STATE_ORDER = ("scheduled", "assigned", "deploying", "running", "uploading", "done",
               "failed", "cancelled", "expired")


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


def campaigns_page(summaries: Sequence[CampaignSummary]) -> Page:
    sections = []
    for c in summaries:
        planned = c.planned_at.strftime("%Y-%m-%d %H:%M UTC") if c.planned_at else "never"
        text = (f"Project {c.project}; submitted {c.created_at:%Y-%m-%d %H:%M} UTC, "
                f"last planned {planned}. Runs: {_runs(c.runs)}.")
        if not c.decisions:
            text += " Every session it asked for is booked."
        sections.append(Section(heading=f"{c.name} ({c.id})", text=text,
                                tables=(_decisions(c),) if c.decisions else ()))
    return Page(
        "campaigns", "Campaigns",
        "The newest campaigns first. Decisions say what the planner could not book and "
        "why: deferred (may run after a re-plan: a node comes back, a quota resets), "
        "skipped (that occurrence will not run) or rejected (fix the spec or the quota).",
        sections=tuple(sections),
        empty=None if summaries else
        "No campaigns yet: submit one with `testbed campaign submit FILE`.",
        filterable=False)
