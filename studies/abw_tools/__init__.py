"""abw-tools (experiments/abw-tools): which available-bandwidth tool to trust behind a
home gateway. Its result format, points and page."""

from __future__ import annotations

from orchestrator.study import ResultReader, Study, StudyPage
from studies.abw_tools.page import SLUG, abw_tools_estimates, abw_tools_page
from studies.abw_tools.points import MEASUREMENTS, read
from testbed_kit import abw_tools

STUDY = Study(
    name="abw-tools",
    # its result holds the run's ABw records, paired with the TATs around them; its
    # manifest (ingest.records: false) keeps them from being written again as abw points
    reader=ResultReader({abw_tools.FORMAT: frozenset({abw_tools.VERSION})}, read),
    measurements=MEASUREMENTS,
    pages=(StudyPage(
        SLUG, "ABw tools", "abw-tools: each ABw method at small and large probes against "
        "TAT on the same link (error, latency, probe bytes, overhead), and the small "
        "probes' error beside the large ones' (a gateway's packet-rate cap).",
        lambda ts, f, _z, r: abw_tools_page(abw_tools_estimates(ts, f, readable=r),
                                            filters=f),
        order=80),),
)
