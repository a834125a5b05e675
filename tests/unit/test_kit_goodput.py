"""First-transfer goodput figures (testbed_kit.goodput): the median's distribution-free
interval against published tables and against simulation, the run summary, and the
result reader on recorded output."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from testbed_kit.goodput import (
    FORMAT,
    GoodputError,
    goodput_bps,
    median_ci,
    summarise,
    transfer_goodputs,
)

FIXTURES = Path(__file__).parent / "fixtures" / "goodput"


@pytest.mark.parametrize(("m", "low_rank", "high_rank"), [
    (6, 1, 6),     # the smallest m with a 95 % interval: the extremes (0.969)
    (8, 1, 8),
    (9, 2, 8),     # 2 P(B <= 1) = 0.039 for B ~ Binomial(9, 1/2); P(B <= 2) is too much
    (10, 2, 9),
    (20, 6, 15),
    (100, 40, 61),  # Le Boudec, Table A.1 (n = 100: 40 and 61)
])
def test_median_interval_uses_the_order_statistics_of_the_tables(
        m: int, low_rank: int, high_rank: int) -> None:
    values = [float(i) for i in range(1, m + 1)]  # value i is the i-th order statistic
    random.Random(m).shuffle(values)
    low, high, level = median_ci(values)
    assert (low, high) == (low_rank, high_rank)
    assert level >= 0.95


def test_median_interval_covers_the_true_median_at_its_level() -> None:
    rng = random.Random(7)
    trials, hits = 2000, 0
    for _ in range(trials):  # lognormal goodputs, median exactly 1.0
        low, high, _level = median_ci([rng.lognormvariate(0.0, 0.5) for _ in range(30)])
        hits += low <= 1.0 <= high
    assert hits / trials >= 0.93  # 0.957 nominal for m = 30; a few trials short allowed


def test_too_few_values_have_no_interval() -> None:
    with pytest.raises(GoodputError, match="at least 6"):
        median_ci([1.0] * 5)
    with pytest.raises(GoodputError, match="the first and at least 6 more"):
        summarise([1.0] * 6)


def test_summary_of_a_cold_first_transfer() -> None:
    rest = [10e6, 11e6, 9e6, 10.5e6, 9.5e6, 12e6, 8e6, 10e6, 11.5e6, 9e6]
    s = summarise([2e6, *rest])
    assert s.transfers == 11 and s.g1_bps == 2e6
    assert s.median_bps == 10e6 and s.mean_bps == pytest.approx(sum(rest) / 10)
    assert s.q1_bps < s.median_bps < s.q3_bps
    assert s.ci_low_bps <= s.median_bps <= s.ci_high_bps
    assert s.g1_below_ci
    # a first transfer as fast as the rest is not below the interval
    assert not summarise([10e6, *rest]).g1_below_ci


def test_goodput_is_bytes_over_time() -> None:
    assert goodput_bps(1_000_000, 2.0) == 4e6
    with pytest.raises(GoodputError):
        goodput_bps(1000, 0.0)


@pytest.mark.parametrize("name", ["loopback-downlink-4096x11.json",
                                  "loopback-uplink-1000000x7.json"])
def test_recorded_results_give_back_their_summary(name: str) -> None:
    doc = json.loads((FIXTURES / name).read_text())
    goodputs = transfer_goodputs(doc)
    assert len(goodputs) == len(doc["transfers"])
    assert summarise(goodputs).as_dict() == pytest.approx(doc["summary"])


def test_reader_refuses_other_formats_and_short_transfers() -> None:
    doc = json.loads((FIXTURES / "loopback-downlink-4096x11.json").read_text())
    with pytest.raises(GoodputError, match=f"not a {FORMAT} v1"):
        transfer_goodputs({**doc, "version": 2})
    short = {**doc, "transfers": [{**doc["transfers"][0], "bytes": 100}]}
    with pytest.raises(GoodputError, match="moved 100 of 4096"):
        transfer_goodputs(short)
