"""abw-tools (issue 14): the session's plan, the pairing of each estimate with the TATs
around it, the per-cell figures, the ingest's points and the page, on hand-made
results whose answers are known."""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from orchestrator.pages.data import Filters, Where
from orchestrator.timeseries.schema import RunContext, bundle_points
from studies.abw_tat.points import ABW
from studies.abw_tools.page import AbwToolsRow, abw_tools_page
from studies.abw_tools.points import ABW_TOOLS
from testbed_kit.abw_tools import (
    FORMAT,
    VERSION,
    AbwToolsOutputError,
    Cell,
    cells,
    pair,
    parse_result,
    plan,
    summarise,
)
from tests.conftest import REPO, experiments

FOLDER = REPO / "experiments" / "abw-tools"


def test_the_plan_brackets_every_estimate_with_tats_and_balances_the_order() -> None:
    six = cells()
    assert [c.label for c in six] == ["yaz 200 B", "yaz 1400 B", "pathload 200 B",
                                      "pathload 1400 B", "spruce 200 B", "spruce 1400 B"]
    steps = plan(4, six)
    assert [s.index for s in steps] == list(range(len(steps)))
    assert [s.kind for s in steps].count("tat") == 5  # one per repetition and the last
    assert steps[0].kind == "tat" and steps[-1].kind == "tat"
    positions: dict[Cell, list[int]] = defaultdict(list)
    for rep in range(4):
        order = [s.cell for s in steps if s.repetition == rep and s.cell is not None]
        assert order == (six if rep % 2 == 0 else six[::-1])
        for i, c in enumerate(order):
            positions[c].append(i)
    # over an even count every cell sits, on average, as far from the TAT before it
    assert {statistics.fmean(p) for p in positions.values()} == {2.5}
    with pytest.raises(ValueError, match="at least one repetition"):
        plan(0, six)
    with pytest.raises(ValueError, match="at least one method"):
        plan(1, [])


def _doc(estimates: list[tuple[int, str, int, float, float, int]],
         tats: list[tuple[int, float]], direction: str = "uplink") -> dict[str, Any]:
    """A result: estimates (step, method, size, bps, latency, probe bytes), TATs."""
    return {"format": FORMAT, "version": VERSION, "direction": direction, "interface": "op3",
            "estimates": [{"step": st, "repetition": 0, "method": m, "size": sz,
                           "start_unix_s": 1e9 + st, "estimate_bps": bps, "latency_s": lat,
                           "probe_bytes": pb, "probe_packets": pb // sz, "control_bytes": 900}
                          for st, m, sz, bps, lat, pb in estimates],
            "tats": [{"step": st, "start_unix_s": 1e9 + st, "mean_bps": bps, "bytes": 1}
                     for st, bps in tats]}


#: Behind a 4,000 packet/s cap on a 16 Mbit/s link: 200-byte probes read ~6.4 Mbit/s.
CAPPED = _doc([(1, "yaz", 200, 6.4e6, 1.0, 200_000), (2, "yaz", 1400, 16e6, 0.8, 700_000),
               (3, "spruce", 200, 0.0, 0.5, 40_000), (4, "spruce", 1400, 15.5e6, 2.8, 280_000),
               (6, "yaz", 1400, 15.0e6, 1.0, 600_000), (7, "yaz", 200, 6.0e6, 1.0, 200_000)],
              [(0, 15.0e6), (5, 16.0e6), (8, 15.5e6)])


def test_each_estimate_is_judged_against_the_mean_of_the_tats_around_it() -> None:
    paired = pair(parse_result(CAPPED))
    assert [p.tat_bps for p in paired] == [15.5e6] * 4 + [15.75e6] * 2
    assert paired[0].error == pytest.approx(6.4e6 / 15.5e6 - 1)
    assert paired[0].overhead == pytest.approx(200_000 * 8 / 1.0 / 15.5e6)
    # an estimate before the first TAT has only the one after it
    edge = pair(parse_result(_doc([(0, "yaz", 200, 1e6, 1, 1000)], [(1, 2e6), (2, 4e6)])))
    assert [(p.tat_bps, p.tats) for p in edge] == [(2e6, 1)]
    # no usable TAT: no pair, rather than a division by zero
    assert pair(parse_result(_doc([(1, "yaz", 200, 1e6, 1, 1000)], [(0, 0.0)]))) == []


def test_the_figures_per_method_and_size() -> None:
    figures = {f.cell.label: f for f in summarise(pair(parse_result(CAPPED)))}
    assert list(figures) == ["yaz 200 B", "yaz 1400 B", "spruce 200 B", "spruce 1400 B"]
    small, large = figures["yaz 200 B"], figures["yaz 1400 B"]
    assert small.estimates == 2 and small.within == 0
    assert small.error_median == pytest.approx(
        statistics.median([6.4e6 / 15.5e6 - 1, 6.0e6 / 15.75e6 - 1]))
    assert small.error_median < -0.3 and abs(large.error_median) < 0.15
    assert large.within == 2 and large.probe_bytes_mean == 650_000
    assert large.latency_mean_s == pytest.approx(0.9) and large.control_bytes_mean == 900
    assert figures["spruce 200 B"].error_median == -1.0  # read the link as full
    assert figures["spruce 1400 B"].probe_bytes_mean == 280_000


@pytest.mark.parametrize(("change", "needle"), [
    ({"format": "testbed.abw-tat"}, "not a testbed.abw-tools v1"),
    ({"direction": "sideways"}, "direction must be"),
    ({"estimates": [{"step": 1}]}, "bad estimate or TAT entry"),
])
def test_the_parser_names_what_is_wrong(change: dict[str, Any], needle: str) -> None:
    with pytest.raises(AbwToolsOutputError, match=needle):
        parse_result({**CAPPED, **change})


def _bundle(doc: dict[str, Any]) -> dict[str, bytes]:
    raw = json.dumps({"type": "estimate", "method": "yaz", "direction": "uplink",
                      "estimate_bps": 6.4e6, "latency_s": 1.0, "start_unix_s": 1e9 + 1,
                      "bytes_sent": 200_000})
    return {"results/abw-tools.json": json.dumps(doc).encode(),
            "results/abw-1-yaz-200.jsonl": raw.encode() + b"\n"}


def test_ingest_writes_one_abw_tools_point_per_estimate_and_no_abw_points() -> None:
    ctx = RunContext(node="it-01", interface="op3", experiment="abw-tools", run="r-1")
    got = bundle_points(_bundle(CAPPED), ctx, catalogue=experiments())
    assert {p.measurement for p in got.points} == {ABW_TOOLS}, got.notes
    first = got.points[0]
    assert first.tags["method"] == "yaz" and first.tags["size"] == "200"
    assert first.tags["direction"] == "uplink"
    assert first.fields["error"] == pytest.approx(6.4e6 / 15.5e6 - 1)
    assert first.fields["tat_bps"] == 15.5e6 and first.fields["probe_bytes"] == 200_000
    assert first.time_ns == (10**9 + 1) * 10**9
    # the same records in another experiment's run are plain abw points
    other = bundle_points(_bundle(CAPPED), RunContext(node="it-01", experiment="abw-tat"),
            catalogue=experiments())
    assert ABW in {p.measurement for p in other.points}


def _rows(doc: dict[str, Any], operator: str, interface: str) -> list[AbwToolsRow]:
    where = Where(node="it-01", country="IT", operator=operator, operator_name="")
    return [AbwToolsRow(time_ns=p.time_ns, where=where, interface=interface, run="r-1",
                        direction=p.tags["direction"], method=p.tags["method"],
                        size=int(p.tags["size"]), estimate_bps=float(p.fields["estimate_bps"]),
                        tat_bps=float(p.fields["tat_bps"]), tats=int(p.fields["tats"]),
                        latency_s=float(p.fields["latency_s"]),
                        probe_bytes=int(p.fields["probe_bytes"]),
                        probe_packets=int(p.fields["probe_packets"]),
                        control_bytes=int(p.fields["control_bytes"]),
                        repetition=int(p.fields["repetition"]), step=int(p.fields["step"]))
            for p in bundle_points(_bundle(doc), RunContext(
                node="it-01", experiment="abw-tools"), catalogue=experiments()).points]


def test_the_page_compares_methods_and_probe_sizes_per_link() -> None:
    uncapped = _doc([(1, "yaz", 200, 9.8e6, 1.0, 150_000), (2, "yaz", 1400, 9.9e6, 1.0, 500_000)],
                    [(0, 9.6e6), (3, 9.6e6)])
    rows = _rows(CAPPED, "222-10", "op3") + _rows(uncapped, "240-01", "op0")
    page = abw_tools_page(rows, filters=Filters())
    summary, sizes = (s.tables[0] for s in page.sections)
    assert [(r[0], r[3], r[4]) for r in summary.rows] == [
        ("222-10", "yaz", "200"), ("222-10", "yaz", "1400"), ("222-10", "spruce", "200"),
        ("222-10", "spruce", "1400"), ("240-01", "yaz", "200"), ("240-01", "yaz", "1400")]
    yaz_small = summary.rows[0]
    median = (6.4 / 15.5 - 1) * 50 + (6.0 / 15.75 - 1) * 50  # of two errors, in %
    assert yaz_small[1] == "it-01 op3" and yaz_small[6] == f"{median:+.1f}"
    assert yaz_small[8] == "0 of 2"
    # per method the small probes' error beside the large ones'
    capped = {r[3]: r for r in sizes.rows if r[0] == "222-10"}
    assert set(capped) == {"yaz", "spruce"}
    assert float(capped["yaz"][-1]) < -30
    flat = [r for r in sizes.rows if r[0] == "240-01"]
    assert len(flat) == 1 and abs(float(flat[0][-1])) < 5
    assert len(page.sections[0].charts) == 6  # accuracy, latency, bytes per link
    assert 'data-category="yaz 200 B"' in page.sections[0].charts[0]
    assert abw_tools_page([], filters=Filters()).empty is not None


@pytest.fixture(scope="module")
def session() -> Iterator[ModuleType]:
    # The experiment folder is an image's source, not a package: import it as the image
    # does (its folder on the path; the kit is the project's).
    sys.path.insert(0, str(FOLDER))
    try:
        import session as module

        yield module
    finally:
        sys.path.remove(str(FOLDER))
        sys.modules.pop("session", None)


@pytest.mark.parametrize(("params", "needle"), [
    ({"methods": ["spruce"], "capacity_bps": 0}, "spruce needs the bottleneck capacity"),
    ({"methods": ["pathchirp"]}, "methods must be some of"),
    ({"small_size": 1400, "large_size": 200}, "must be below large_size"),
])
def test_what_no_step_could_measure_is_refused_before_any_traffic(
        session: ModuleType, tmp_path: Path, params: dict[str, Any], needle: str) -> None:
    p = {**session.DEFAULTS, "capacity_bps": 16e6, **params}
    doc = session.run_session({"server_address": "192.0.2.1", "parameters": p}, tmp_path)
    assert needle in doc["error"] and doc["steps"] == [] and "summary" not in doc
    written = json.loads((tmp_path / "abw-tools.json").read_text())
    assert written["format"] == FORMAT and written["error"] == doc["error"]


def test_the_manifest_forecast_grows_with_repetitions_and_slow_links() -> None:
    from orchestrator.catalogue.loader import load_catalogue

    manifest = load_catalogue(REPO / "experiments")["abw-tools"]
    defaults = manifest.resolve_parameters({})
    assert defaults["methods"] == ["yaz", "pathload", "spruce"]
    assert (defaults["small_size"], defaults["large_size"]) == (200, 1400)
    slot, data = manifest.forecast(defaults, rate_bps=10e6)
    slow, _ = manifest.forecast(defaults, rate_bps=2e6)
    more, more_data = manifest.forecast({**defaults, "repetitions": 4}, rate_bps=10e6)
    assert 60 < slot < slow and slot < more and data < more_data
    with pytest.raises(ValueError, match="methods"):
        manifest.resolve_parameters({"methods": ["yaz", "yaz"]})
