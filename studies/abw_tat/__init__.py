"""abw-tat (experiments/abw-tat): the ABw-TAT-ABw session. Its result format, the ABw
estimator's records as points (its TATs are the tat study's), and the ABw vs TAT page."""

from __future__ import annotations

from orchestrator.study import RecordsReader, ResultReader, Study, StudyPage
from studies.abw_tat.page import SLUG, abw_tat_page
from studies.abw_tat.points import MEASUREMENTS, read_records, read_summary
from studies.abw_tat.queries import abw_estimates
from studies.abw_tat.release import ESTIMATES, PAIRS
from studies.abw_tat.results import COLUMNS
from studies.tat.queries import tat_summaries

#: The session's summary file (experiments/abw-tat/session.py writes it).
FORMAT = "testbed.abw-tat"

STUDY = Study(
    name="abw-tat",
    reader=ResultReader({FORMAT: frozenset({1})}, read_summary),
    records=RecordsReader(read_records),
    measurements=MEASUREMENTS,
    columns=COLUMNS,
    tables=(ESTIMATES,),
    derived=(PAIRS,),
    pages=(StudyPage(
        SLUG, "ABw vs TAT", "ABw estimates against TAT per country and operator, "
        "the relative-difference CDF, ABw latency and volume ratio.",
        lambda ts, f, _z, r: abw_tat_page(tat_summaries(ts, f, readable=r),
                                          abw_estimates(ts, f, readable=r), filters=f),
        order=30),),
)
