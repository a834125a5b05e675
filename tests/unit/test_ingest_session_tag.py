"""Which runs' points form one ABw-TAT-ABw session on the pages (and in releases): the
runs of one campaign occurrence on a SIM, except a run that is a whole session."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.services.ingest import session_tag
from orchestrator.store.tables import Run
from tests.conftest import experiments

OCCURRENCE = datetime(2026, 11, 26, 1, 0, tzinfo=UTC)


def _run(run_id: str, experiment: str, *, campaign: str | None = "c-1") -> Run:
    return Run(id=run_id, campaign_id=campaign, node_id="se-01", interface="op0",
               experiment=experiment, experiment_version=1,
               session_occurrence=OCCURRENCE if campaign else None)


def test_an_abw_tat_run_is_its_own_session_beside_the_occurrences_tat_step() -> None:
    # the demo campaign: a tat step, then an abw-tat step, in one occurrence on a SIM
    tat, session = _run("r-tat", "tat"), _run("r-abw-tat", "abw-tat")
    assert session_tag(session, experiments()) == "r-abw-tat"
    assert session_tag(tat, experiments()) != session_tag(session, experiments())


def test_separate_steps_of_one_occurrence_share_its_tag() -> None:
    first, second = _run("r-1", "tat"), _run("r-2", "tat")
    catalogue = experiments()
    assert session_tag(first, catalogue) == session_tag(second, catalogue) == \
        "c-1/se-01/op0/20261126T010000Z"


def test_a_run_outside_campaigns_is_its_own_session() -> None:
    assert session_tag(_run("r-9", "tat", campaign=None), experiments()) == "r-9"
