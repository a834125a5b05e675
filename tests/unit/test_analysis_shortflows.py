"""The short-flows analysis (pure): the idealised slow-start model L(S), its RTT and
capacity sensitivity, and the sensitivity regressed from measurements."""

from __future__ import annotations

import math
import random

import pytest

from studies.short_flows.analysis import (
    INITIAL_WINDOW,
    MSS,
    FlowSample,
    base_rtt_s,
    capacity_bps,
    measured_sensitivity,
    median_fct_by_size,
    model_fct_s,
    model_sensitivity,
)
from testbed_kit.short_flows import short_sizes

RTT, CAP = 0.05, 20e6


def test_a_flow_in_the_initial_window_takes_two_round_trips_and_its_bytes() -> None:
    """Handshake, then the request and the data's way back, plus the bytes at the
    capacity: one window, no stall."""
    for size in (1388, INITIAL_WINDOW * MSS):
        assert model_fct_s(size, rtt_s=RTT, capacity_bps=CAP) == pytest.approx(
            2 * RTT + size * 8 / CAP)
    # one byte more waits for the first window's ACK: a stall of an RTT, less the time
    # the window took to send (after its first segment)
    stall = RTT - (INITIAL_WINDOW - 1) * MSS * 8 / CAP
    assert model_fct_s(INITIAL_WINDOW * MSS + 1, rtt_s=RTT, capacity_bps=CAP) == pytest.approx(
        2 * RTT + (INITIAL_WINDOW * MSS + 1) * 8 / CAP + stall)


@pytest.mark.parametrize(("rtt_segments", "expected_rtts", "expected_segments"), [
    (5.0, 5, 10),  # RTT >= 3 segment times: a stall after each of the three windows
    (2.5, 4, 13),  # one segment time < RTT < 3: the third window (4 segments) does not stall
])
def test_the_textbook_slow_start_latency(rtt_segments: float, expected_rtts: int,
                                         expected_segments: int) -> None:
    """Kurose and Ross's worked case of the slow-start latency model: an object of 14
    segments, one segment in the first window (windows of 1, 2, 4 and 7): 2 RTT + O/R +
    the stalls, i.e. 5 RTT + 10 S/R when every window stalls, 4 RTT + 13 S/R when the
    third does not."""
    mss, capacity = 1000, 8e5  # one segment in 10 ms
    segment_s = mss * 8 / capacity
    rtt = rtt_segments * segment_s
    assert model_fct_s(14 * mss, rtt_s=rtt, capacity_bps=capacity, mss=mss,
                       initial_window=1) == pytest.approx(
        expected_rtts * rtt + expected_segments * segment_s)


def test_a_long_flow_approaches_size_over_capacity() -> None:
    size = 200 * 1024**2
    fct = model_fct_s(size, rtt_s=RTT, capacity_bps=CAP)
    assert size * 8 / CAP < fct < size * 8 / CAP * 1.02


def test_the_model_grows_with_size() -> None:
    fcts = [model_fct_s(s, rtt_s=RTT, capacity_bps=CAP) for s in short_sizes()]
    assert fcts == sorted(fcts) and fcts[0] < fcts[-1]


def test_rtt_hurts_short_flows_more_and_capacity_hurts_long_ones_more() -> None:
    """The reference's statement, from the model: for every short size a 10 % longer RTT
    costs more than a 10 % lower capacity; for a 20 MiB flow it is the other way."""
    for size in short_sizes():
        s = model_sensitivity(size, rtt_s=RTT, capacity_bps=CAP)
        assert s.rtt_hurts_more, (size, s)
        assert s.rtt_up == pytest.approx(0.10, abs=0.02)  # pure round trips: ~10 %
    long = model_sensitivity(20 * 1024**2, rtt_s=RTT, capacity_bps=CAP)
    assert not long.rtt_hurts_more and long.capacity_down > 0.09


def test_bad_model_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        model_fct_s(0, rtt_s=RTT, capacity_bps=CAP)
    with pytest.raises(ValueError):
        model_fct_s(1000, rtt_s=0, capacity_bps=CAP)
    with pytest.raises(ValueError):
        model_fct_s(1000, rtt_s=RTT, capacity_bps=CAP, initial_window=0)


def _sessions(n: int, *, e_rtt: float, e_cap: float, seed: int = 1) -> list[FlowSample]:
    """Sessions whose short-flow times follow fct = k(size) * rtt^e_rtt * cap^e_cap with
    a little noise, and whose long flow moves at ``cap``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        rtt = RTT * rng.uniform(0.7, 1.5)
        cap = CAP * rng.uniform(0.5, 1.2)
        for size in short_sizes():
            fct = (size / 1e4) ** 0.3 * rtt ** e_rtt * (cap / CAP) ** e_cap
            out.append(FlowSample(f"s{i}", i, "short", size,
                                  fct * math.exp(rng.gauss(0, 0.01)), rtt))
        out.append(FlowSample(f"s{i}", i, "long", 10**7, 10**7 * 8 / cap, rtt))
    return out


def test_measured_sensitivity_recovers_the_elasticities() -> None:
    s = measured_sensitivity(_sessions(20, e_rtt=0.9, e_cap=-0.2))
    assert s is not None
    assert s.rtt_up == pytest.approx(1.1 ** 0.9 - 1, abs=0.01)
    assert s.capacity_down == pytest.approx(0.9 ** -0.2 - 1, abs=0.01)
    assert s.rtt_hurts_more
    flipped = measured_sensitivity(_sessions(20, e_rtt=0.1, e_cap=-1.0))
    assert flipped is not None and not flipped.rtt_hurts_more


def test_too_few_sessions_give_no_measured_sensitivity() -> None:
    assert measured_sensitivity(_sessions(3, e_rtt=1, e_cap=0)) is None


def test_base_rtt_capacity_and_medians() -> None:
    samples = _sessions(5, e_rtt=1, e_cap=0)
    assert base_rtt_s(samples) == pytest.approx(
        sorted(s.rtt_3whs_s or 0 for s in samples)[len(samples) // 2], rel=0.5)
    cap = capacity_bps(samples)
    assert cap is not None and 0.5 * CAP <= cap <= 1.2 * CAP
    medians = median_fct_by_size(samples)
    assert list(medians) == short_sizes()
    assert base_rtt_s([]) is None and capacity_bps([]) is None
