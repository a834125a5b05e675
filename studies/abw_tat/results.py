"""The abw-tat study's columns in ``testbed results``, from a session's summary: its
TAT mean, ABw mean, relative difference RD and volume ratio, and the bytes its TATs
moved on the interface."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.study import ResultColumn, rate_text


def _summary(result: Mapping[str, Any]) -> Mapping[str, Any]:
    return result.get("summary") or {}


def _rd(result: Mapping[str, Any]) -> str | None:
    rd = _summary(result).get("rd")
    return None if rd is None else f"{rd:.1%}"


def _ratio(result: Mapping[str, Any]) -> str | None:
    ratio = _summary(result).get("volume_ratio_iface")
    return f"{ratio:.1f}" if ratio else None


COLUMNS = (
    ResultColumn("tat", lambda r: rate_text(_summary(r).get("tat_mean_bps")), order=10),
    ResultColumn("abw", lambda r: rate_text(_summary(r).get("abw_mean_bps")), order=20),
    ResultColumn("rd", _rd, order=30),
    ResultColumn("tat/abw bytes", _ratio, order=40),
    ResultColumn("bytes", lambda r: _summary(r).get("tat_iface_bytes")),
)
