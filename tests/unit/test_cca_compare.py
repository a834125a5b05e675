"""cca-compare's pure parts: the session's balanced plan, the responder's request line
with its options, the result's parser, the radio of a transfer's span, the statistics
(SINR bins, handover classes, Mann-Whitney) and the page from rows made by hand."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from scipy.stats import mannwhitneyu

from orchestrator.pages.data import Filters, Where
from studies.cca_compare.analysis import (
    TransferSample,
    differences,
    handover_class,
    mann_whitney,
    sinr_bin,
    sinr_label,
)
from studies.cca_compare.page import CcaRow, cca_page
from studies.cca_compare.points import ModemSample, radio_during
from testbed_kit.cca_compare import CcaCompareOutputError, parse_result, plan
from testbed_kit.short_flows import FlowRequest, parse_flow_request, parse_request

TELENOR = Where(node="it-01", country="IT", operator="242-01", operator_name="Telenor")


def test_the_plan_alternates_and_balances_the_order() -> None:
    p = plan(4)
    assert len(p) == 16 and [t.index for t in p] == list(range(16))
    assert [(t.kind, t.cca) for t in p[:8]] == [
        ("bulk", "cubic"), ("bulk", "bbr"), ("download", "cubic"), ("download", "bbr"),
        ("bulk", "bbr"), ("bulk", "cubic"), ("download", "bbr"), ("download", "cubic")]
    # over an even count each control goes first, for each kind, equally often
    firsts = Counter((t.kind, t.cca) for i, t in enumerate(p)
                     if i == 0 or p[i - 1].kind != t.kind or p[i - 1].repetition != t.repetition)
    assert firsts == {("bulk", "cubic"): 2, ("bulk", "bbr"): 2,
                      ("download", "cubic"): 2, ("download", "bbr"): 2}
    assert Counter(t.cca for t in p) == {"cubic": 8, "bbr": 8}
    with pytest.raises(ValueError):
        plan(0)


def test_request_lines_with_options_round_trip() -> None:
    line = FlowRequest("downlink", 1 << 30, cca="bbr", seconds=20).line()
    assert line == b"down 1073741824 cca=bbr seconds=20\n"
    assert parse_flow_request(line) == FlowRequest("downlink", 1 << 30, "bbr", 20.0)
    assert parse_flow_request(b"up 1000000 cca=cubic\n") == FlowRequest(
        "uplink", 1_000_000, "cubic", None)
    assert parse_request(b"down 1388\n") == ("downlink", 1388)  # short-flows unchanged


@pytest.mark.parametrize("line", [
    b"down 10 cca=BBR;rm\n", b"down 10 cca=\n", b"down 10 seconds=0\n",
    b"down 10 seconds=nan\n", b"down 10 seconds=601\n", b"down 10 rate=5\n",
    b"down 10 cca=bbr cca=cubic\n", b"down 10 seconds\n"])
def test_bad_options_are_refused_with_the_reason(line: bytes) -> None:
    with pytest.raises(ValueError, match="cca|seconds|option"):
        parse_flow_request(line)


def _doc(**over: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "format": "testbed.cca-compare", "version": 1, "direction": "downlink",
        "server": "s", "port": 5301, "interface": "op2", "start": "", "bulk_s": 20,
        "download_bytes": 1_000_000, "transfers": [
            {"index": 0, "repetition": 0, "cca": "bbr", "kind": "bulk", "local_port": 4000,
             "start_unix_s": 10.0, "end_unix_s": 30.0, "bytes_moved": 5, "error": None}]}
    return doc | over


def test_the_result_parser_names_what_is_wrong() -> None:
    parsed = parse_result(_doc())
    assert parsed.sender == "server" and parsed.transfers[0].cca == "bbr"
    assert parse_result(_doc(direction="uplink")).sender == "node"
    for bad, words in ((_doc(version=2), "v1"), (_doc(direction="up"), "direction"),
                       (_doc(transfers=[{"cca": "vegas"}]), "cca"),
                       (_doc(transfers=None), "transfers")):
        with pytest.raises(CcaCompareOutputError, match=words):
            parse_result(bad)


def _sample(t: float, handovers: int | None, sinr: float = 20.0, cell: int = 1
            ) -> ModemSample:
    return ModemSample(time_s=t, interface="op2", sinr=sinr, rsrp=-90.0, band="B20",
                       cell_id=cell, handovers=handovers)


def test_the_radio_of_a_span() -> None:
    samples = [_sample(0, 3, 10.0), _sample(1, 3, 20.0), _sample(2, 4, 30.0, cell=2),
               _sample(3, 4, 12.0, cell=2)]
    during = radio_during(samples, 0.5, 2.5)
    assert during.sinr_db == 25.0 and during.samples == 2 and during.handovers == 1
    # a short transfer between two samples: the one before describes it, and the
    # counter's move from the sample before to the one after is its handover count
    short = radio_during(samples, 0.2, 0.4)
    assert short.sinr_db == 10.0 and short.handovers == 0 and short.samples == 1
    assert radio_during(samples, 1.2, 1.4).handovers == 1
    # no sample after it: handovers unknown, not zero
    assert radio_during(samples, 2.5, 9.0).handovers is None
    # a modem without a counter: changes of cell
    no_counter = [_sample(t, None, cell=c) for t, c in ((0, 1), (1, 1), (2, 2), (3, 3))]
    assert radio_during(no_counter, 0.5, 2.5).handovers == 2


def test_sinr_bins_and_handover_classes() -> None:
    assert [sinr_bin(x) for x in (22.4, 25.0, -3.0, None)] == [20.0, 25.0, -5.0, None]
    assert sinr_label(20.0) == "20 to 25 dB" and sinr_label(None) == "unknown"
    assert [handover_class(h) for h in (0, 2, None)] == [
        "without handover", "with handover", "unknown"]


def _transfers(cca: str, rates: list[float], retrans: float) -> list[TransferSample]:
    return [TransferSample(cca=cca, kind="bulk", throughput_bps=r, self_delay_s=0.01,
                           retrans_pct=retrans + i * 0.01, dupack_pct=1.0,
                           sinr_db=22.0, handovers=1) for i, r in enumerate(rates)]


def test_mann_whitney_is_scipys_two_sided_test() -> None:
    rng = random.Random(7)
    a = [rng.gauss(10, 1) for _ in range(12)]
    b = [rng.gauss(12, 1) for _ in range(9)]
    u, p = mann_whitney(a, b) or (None, None)
    ref = mannwhitneyu(a, b, alternative="two-sided")
    assert (u, p) == (float(ref.statistic), float(ref.pvalue)) and p is not None and p < 0.01
    assert mann_whitney(a[:2], b) is None  # too few on one side
    assert mann_whitney([1.0] * 5, [1.0] * 5) is None  # nothing to rank


def test_differences_per_metric() -> None:
    cubic = _transfers("cubic", [5e6, 5.2e6, 4.9e6, 5.1e6, 5.3e6], retrans=2.0)
    bbr = _transfers("bbr", [5.1e6, 5.0e6, 5.2e6, 4.8e6, 5.25e6], retrans=0.1)
    got = {d.metric: d for d in differences(cubic, bbr)}
    assert got["retransmissions"].significant is True  # 2 % against 0.1 %, every pair
    assert got["throughput"].significant is False
    assert got["throughput"].median_a == pytest.approx(5.1) and got["throughput"].n_b == 5
    assert got["duplicate ACKs"].p_value is None  # all equal: no test


def _row(cca: str, kind: str, rate: float, sinr: float, handovers: int, *,
         status: str = "ok") -> CcaRow:
    return CcaRow(time_ns=0, where=TELENOR, run="r", direction="downlink", cca=cca,
                  kind=kind, status=status, throughput_bps=rate, self_delay_s=0.02,
                  retrans_pct=1.0 if cca == "cubic" else 0.2, dupack_pct=3.0,
                  sinr_db=sinr, handovers=handovers)


def test_the_page_shows_both_controls_by_sinr_and_handover() -> None:
    rows = [_row(cca, kind, 6e6 + i, sinr, h)
            for i, (sinr, h) in enumerate(((22.0, 1), (27.0, 0), (23.0, 0), (26.0, 2)))
            for cca in ("cubic", "bbr") for kind in ("bulk", "download")]
    rows.append(_row("bbr", "bulk", 0, 22.0, 0, status="failed"))
    page = cca_page(rows, filters=Filters())
    summary, sinr, handover, tests = (s.tables[0] for s in page.sections)
    assert {(r[2], r[3]) for r in summary.rows} == {
        (k, c) for k in ("bulk transfers", "downloads") for c in ("cubic", "bbr")}
    assert [r[5] for r in summary.rows if r[2] == "bulk transfers" and r[3] == "bbr"] == ["1"]
    assert {(r[3], r[4]) for r in sinr.rows if r[2] == "bulk transfers"} == {
        (b, c) for b in ("20 to 25 dB", "25 to 30 dB") for c in ("bbr", "cubic")}
    assert {(r[3], r[4]) for r in handover.rows if r[2] == "downloads"} == {
        (h, c) for h in ("with handover", "without handover") for c in ("bbr", "cubic")}
    retrans = [r for r in tests.rows if r[3] == "retransmissions"]
    assert len(retrans) == 2 and all(r[-1] == "yes" for r in retrans)  # 1 % vs 0.2 %
    dupacks = [r for r in tests.rows if r[3] == "duplicate ACKs"]
    assert all(r[-1] == "no test: every value the same" for r in dupacks)
    assert len(page.sections[0].charts) == 8  # four metrics, two kinds
    assert cca_page([], filters=Filters()).empty is not None
