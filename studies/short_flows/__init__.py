"""short-flows (experiments/short-flows): short-flow completion times by size and time
of day. Its result format, points joined with the run's capture, analysis and page."""

from __future__ import annotations

from orchestrator.study import ResultReader, Study, StudyPage
from studies.short_flows.page import SLUG, short_flows, short_flows_page
from studies.short_flows.points import MEASUREMENTS, read
from testbed_kit import short_flows as kit

STUDY = Study(
    name="short-flows",
    reader=ResultReader({kit.FORMAT: frozenset({kit.VERSION})}, read, joins_captures=True),
    measurements=MEASUREMENTS,
    pages=(StudyPage(
        SLUG, "Short flows", "Short-flow completion time against size per operator, with "
        "the slow-start model, its RTT/capacity sensitivity and the time-of-day test per "
        "size.",
        lambda ts, f, _z, r: short_flows_page(short_flows(ts, f, readable=r), filters=f),
        order=50),),
)
