"""The tat study's column in ``testbed results``: the transfer's mean rate."""

from __future__ import annotations

from orchestrator.study import ResultColumn, rate_text

COLUMNS = (ResultColumn("tat", lambda result: rate_text(result.get("mean_bps")), order=10),)
