"""goodput-sequence (experiments/goodput-sequence, docs/goodput-sequence.md): the first
transfer after idle against the rest. Its result format, points and page."""

from __future__ import annotations

from orchestrator.study import ResultReader, Study, StudyPage
from studies.goodput_sequence.page import SLUG, goodput_page, goodput_transfers
from studies.goodput_sequence.points import MEASUREMENTS, read
from testbed_kit import goodput

STUDY = Study(
    name="goodput-sequence",
    reader=ResultReader({goodput.FORMAT: frozenset({goodput.VERSION})}, read),
    measurements=MEASUREMENTS,
    pages=(StudyPage(
        SLUG, "First transfer", "goodput-sequence: goodput per transfer size, the first "
        "transfer after idle (g1) against the median of the rest and its 95 % interval.",
        lambda ts, f, _z, r: goodput_page(goodput_transfers(ts, f, readable=r), filters=f),
        order=60),),
)
