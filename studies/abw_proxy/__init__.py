"""The ABw proxy (docs/abw-proxy.md): a calibrated TAT proxy per SIM from the ABw-TAT-ABw
sessions' points. Its planning contribution (proxy mode's answers: does a SIM's next
window need a TAT?) and its page (predictions against measured TATs, coverage, bytes
saved). The experiment that may run in proxy mode says so in its manifest
(experiments/abw-tat/experiment.yaml, ``proxy.calibration``); the fit is the shared
library's (``orchestrator.analysis.proxy``)."""

from __future__ import annotations

from orchestrator.study import Study, StudyPage
from studies.abw_proxy.page import SLUG, TITLE, abw_proxy_page, proxy_histories
from studies.abw_proxy.planning import verdicts

STUDY = Study(
    name="abw-proxy",
    pages=(StudyPage(
        SLUG, TITLE, "The calibrated TAT proxy per SIM: predicted against measured TAT "
        "with 90 % intervals, their coverage on held-back TATs, the median absolute "
        "error, and bytes spent against an all-TAT campaign (docs/abw-proxy.md).",
        lambda ts, f, _z, r: abw_proxy_page(proxy_histories(ts, f, readable=r), filters=f),
        order=90),),
    proxy_verdicts=verdicts,
)
