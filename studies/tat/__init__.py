"""tat (experiments/tat): TCP achievable throughput in 100 ms receiver bins. Its result
format (also the TATs of an ABw-TAT-ABw session), its points, and its pages: hourly and
daily behaviour and the time-of-day significance of the transfers' mean rates."""

from __future__ import annotations

from orchestrator.study import ChoiceSource, ResultReader, Study, StudyPage
from studies.tat.page import daily_page, hourly_page, timeofday_page
from studies.tat.points import MEASUREMENTS, TAT_SUMMARY, read
from studies.tat.queries import tat_summaries
from studies.tat.release import TABLES
from studies.tat.results import COLUMNS
from testbed_kit import tat_result

STUDY = Study(
    name="tat",
    reader=ResultReader({tat_result.FORMAT: frozenset({tat_result.VERSION})}, read),
    measurements=MEASUREMENTS,
    columns=COLUMNS,
    tables=TABLES,
    pages=(
        StudyPage("hourly", "Hourly behaviour",
                  "TAT rate by hour of day per operator (box plots).",
                  lambda ts, f, z, r: hourly_page(tat_summaries(ts, f, readable=r),
                                                  zones=z, filters=f), order=10),
        StudyPage("daily", "Daily behaviour",
                  "Daily mean TAT rate per operator over a campaign.",
                  lambda ts, f, z, r: daily_page(tat_summaries(ts, f, readable=r),
                                                 zones=z, filters=f), order=20),
        StudyPage("time-of-day", "Time-of-day significance",
                  "Daily-cycle test (Lomb-Scargle, differential BIC) per node and operator.",
                  lambda ts, f, z, r: timeofday_page(tat_summaries(ts, f, readable=r),
                                                     zones=z, filters=f), order=40),
    ),
    # the drop-downs offer what has TAT transfers
    choices=(ChoiceSource(TAT_SUMMARY, "mean_bps"),),
)
