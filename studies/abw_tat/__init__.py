"""abw-tat (experiments/abw-tat): the ABw-TAT-ABw session. Its result format, and the
ABw estimator's records as points (its TATs are the tat study's)."""

from __future__ import annotations

from orchestrator.study import RecordsReader, ResultReader, Study
from studies.abw_tat.points import MEASUREMENTS, read_records, read_summary

#: The session's summary file (experiments/abw-tat/session.py writes it).
FORMAT = "testbed.abw-tat"

STUDY = Study(
    name="abw-tat",
    reader=ResultReader({FORMAT: frozenset({1})}, read_summary),
    records=RecordsReader(read_records),
    measurements=MEASUREMENTS,
)
