"""Small pure pieces of the planner and quota wiring: sizes on the CLI, the link rate a
result reports, quota points, and the agent's measured-bytes report staying compatible."""

from __future__ import annotations

from datetime import UTC, datetime

import click
import pytest

from orchestrator.cli.quotas import parse_bytes
from orchestrator.services.results import link_rate
from orchestrator.timeseries.lineprotocol import encode
from orchestrator.timeseries.schema import quota_point
from testbed_common import wire
from testbed_common.states import RunState

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "expected"), [
    ("2GB", 2 * 10**9), ("500 MB", 5 * 10**8), ("1GiB", 2**30), ("1.5gb", 15 * 10**8),
    ("300000", 300000), ("12kB", 12000),
])
def test_sizes_parse_with_units(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "two GB", "5 GHz", "-1GB"])
def test_bad_sizes_say_what_is_expected(text: str) -> None:
    with pytest.raises(click.BadParameter, match="expected a size such as 2GB"):
        parse_bytes(text)


def test_link_rate_comes_from_tat_and_abw_tat_results() -> None:
    assert link_rate({"mean_bps": 9.5e6}) == 9.5e6
    assert link_rate({"tat_mean_bps": 4e6, "abw_mean_bps": 3e6}) == 4e6
    assert link_rate({"mean_bps": 0}) is None
    assert link_rate({"mean_bps": True}) is None
    assert link_rate({"rtt_s": 0.04}) is None


def test_quota_point_carries_sim_tags_and_leaves_out_a_missing_cap() -> None:
    p = quota_point(node="se-01", interface="op0", operator="240-01", operator_name="Telia",
                    country="SE", used=10, reserved=20, limit=None, at=NOW)
    line = encode(p)
    assert line.startswith("quota,country=SE,interface=op0,node=se-01,operator=240-01,"
                           "operator_name=Telia ")
    assert "reserved_bytes=20i" in line and "used_bytes=10i" in line
    assert "limit_bytes" not in line


def test_state_report_measured_bytes_is_optional_and_left_out_when_unknown() -> None:
    old = wire.StateReport.model_validate(
        {"state": "uploading", "reason": "done", "at": NOW.isoformat()})
    assert old.measured_bytes is None
    assert "measured_bytes" not in old.model_dump(mode="json", exclude_none=True)
    new = wire.StateReport(state=RunState.UPLOADING, reason="done", at=NOW,
                           measured_bytes=123)
    assert new.model_dump(mode="json", exclude_none=True)["measured_bytes"] == 123
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        wire.StateReport(state=RunState.FAILED, reason="x", at=NOW, measured_bytes=-1)
