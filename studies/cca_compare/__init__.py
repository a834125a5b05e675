"""cca-compare (experiments/cca-compare): CUBIC against BBR on the same radio
conditions. Its result format, points joined with the sender's capture and the modem
samples, analysis and page."""

from __future__ import annotations

from orchestrator.study import ResultReader, Study, StudyPage
from studies.cca_compare.page import SLUG, cca_page, cca_transfers
from studies.cca_compare.points import MEASUREMENTS, read
from testbed_kit import cca_compare

STUDY = Study(
    name="cca-compare",
    reader=ResultReader({cca_compare.FORMAT: frozenset({cca_compare.VERSION})}, read,
                        joins_captures=True),
    measurements=MEASUREMENTS,
    pages=(StudyPage(
        SLUG, "CUBIC vs BBR", "cca-compare: throughput, self-inflicted delay, "
        "retransmissions and duplicate ACKs per congestion control, by SINR and with or "
        "without a handover, with a Mann-Whitney test of each difference.",
        lambda ts, f, _z, r: cca_page(cca_transfers(ts, f, readable=r), filters=f),
        order=70),),
)
