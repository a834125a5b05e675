"""tat (experiments/tat): TCP achievable throughput in 100 ms receiver bins. Its result
format (also the TATs of an ABw-TAT-ABw session) and its points."""

from __future__ import annotations

from orchestrator.study import ResultReader, Study
from studies.tat.points import MEASUREMENTS, read
from testbed_kit import tat_result

STUDY = Study(
    name="tat",
    reader=ResultReader({tat_result.FORMAT: frozenset({tat_result.VERSION})}, read),
    measurements=MEASUREMENTS,
)
