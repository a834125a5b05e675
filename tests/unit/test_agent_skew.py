"""The emulated wrong clock: armed by a file, applied with libfaketime to the agent and
handed to its experiments; inert when not armed."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.skew import (
    CLOCK_SKEW,
    SkewError,
    experiment_env,
    parse_skew,
    skewed_environment,
)

LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def test_unarmed_means_the_real_clock(tmp_path: Path) -> None:
    assert skewed_environment(tmp_path / "faults", {"PATH": "/bin"}, [LIB]) is None
    assert experiment_env({"PATH": "/bin", "LD_PRELOAD": "/x.so"}) == {}


def test_armed_restarts_the_agent_on_a_skewed_clock(tmp_path: Path) -> None:
    (tmp_path / CLOCK_SKEW).write_text("-300\n")
    env = skewed_environment(tmp_path, {"PATH": "/bin"}, [LIB])
    assert env == {"PATH": "/bin", "FAKETIME": "-300", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                   "LD_PRELOAD": LIB}
    # Started again under it: not once more; and its experiments get the same clock.
    assert skewed_environment(tmp_path, env, [LIB]) is None
    assert experiment_env(env) == {"FAKETIME": "-300", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                                   "LD_PRELOAD": LIB}
    (tmp_path / CLOCK_SKEW).write_text("300")
    assert skewed_environment(tmp_path, {}, [LIB])["FAKETIME"] == "+300"  # type: ignore[index]


def test_a_fault_that_cannot_be_applied_says_why(tmp_path: Path) -> None:
    (tmp_path / CLOCK_SKEW).write_text("300")
    with pytest.raises(SkewError, match="libfaketime is not installed"):
        skewed_environment(tmp_path, {}, [])
    for bad in ("5 min", "nan", "1e9", ""):
        with pytest.raises(SkewError, match="clock-skew"):
            parse_skew(bad)
