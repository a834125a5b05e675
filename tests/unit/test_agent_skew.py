"""The emulated wrong clock: armed by a file, applied with tools/skewclock to the agent
and handed to its experiments; inert when not armed."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.skew import (
    CLOCK_SKEW,
    SkewError,
    emulated_skew_s,
    experiment_env,
    parse_skew,
    skew_capture,
    skewed_environment,
)

LIB = "/usr/local/lib/libskewclock.so"


def test_unarmed_means_the_real_clock(tmp_path: Path) -> None:
    assert skewed_environment(tmp_path / "faults", {"PATH": "/bin"},
                              library_present=True) is None
    assert experiment_env({"PATH": "/bin", "LD_PRELOAD": "/x.so"}) == {}


def test_armed_restarts_the_agent_on_a_skewed_clock(tmp_path: Path) -> None:
    (tmp_path / CLOCK_SKEW).write_text("-300\n")
    env = skewed_environment(tmp_path, {"PATH": "/bin"}, library_present=True)
    assert env == {"PATH": "/bin", "TESTBED_CLOCK_SKEW_S": "-300", "LD_PRELOAD": LIB}
    # Started again under it: not once more; and its experiments get the same clock.
    assert skewed_environment(tmp_path, env, library_present=True) is None
    assert experiment_env(env) == {"TESTBED_CLOCK_SKEW_S": "-300", "LD_PRELOAD": LIB}
    (tmp_path / CLOCK_SKEW).write_text("300")
    fast = skewed_environment(tmp_path, {}, library_present=True)
    assert fast is not None and fast["TESTBED_CLOCK_SKEW_S"] == "+300"


def test_a_fault_that_cannot_be_applied_says_why(tmp_path: Path) -> None:
    (tmp_path / CLOCK_SKEW).write_text("300")
    with pytest.raises(SkewError, match="libskewclock.so is not in the image"):
        skewed_environment(tmp_path, {}, library_present=False)
    for bad in ("5 min", "nan", "1e9", ""):
        with pytest.raises(SkewError, match="clock-skew"):
            parse_skew(bad)


def _frame_times(data: bytes) -> list[int]:
    from orchestrator.analysis.pcap import read_capture

    return [p.ts_ns for p in read_capture(data).packets]


def test_the_nodes_capture_is_stamped_on_the_emulated_clock(tmp_path: Path) -> None:
    from tests.conftest import REPO

    recorded = (REPO / "tests/unit/fixtures/tcp-6mbit-tx.pcap").read_bytes()
    pcap = tmp_path / "op0.pcap"
    for skew in (300.0, -300.0, 0.25):
        pcap.write_bytes(recorded)
        moved = skew_capture(pcap, skew)
        before, after = _frame_times(recorded), _frame_times(pcap.read_bytes())
        assert moved == len(before) > 100
        assert after == [t + round(skew * 1e9) for t in before]
        assert pcap.stat().st_size == len(recorded)
    # cut short at the end (tcpdump killed), within a record's data or its header:
    # every record whose header is whole moves, and the file keeps its size
    count = len(_frame_times(recorded))
    for damaged in (recorded[:-7], recorded + b"\x01\x02\x03\x04\x05"):
        pcap.write_bytes(damaged)
        assert skew_capture(pcap, 1.0) == count
        assert pcap.stat().st_size == len(damaged)
    pcap.write_bytes(b"not a capture" * 3)
    with pytest.raises(ValueError, match="not a classic pcap"):
        skew_capture(pcap, 1.0)


def test_emulated_skew_is_read_from_the_agents_environment() -> None:
    assert emulated_skew_s({}) is None
    assert emulated_skew_s({"TESTBED_CLOCK_SKEW_S": "+300", "LD_PRELOAD": LIB}) == 300.0
    assert emulated_skew_s({"TESTBED_CLOCK_SKEW_S": "+300"}) is None  # not preloaded
