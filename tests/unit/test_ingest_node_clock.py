"""A skewed node's points land at orchestrator time: ingest moves everything the node
stamped (results, its capture, its metadata samples) by the clock offset the agent
recorded in meta/run.json; a bundle without the record is written as stamped.

The bundles are built as the agent builds them (meta/run.json by the agent's own
write_run_meta, build_bundle) from recorded results: the tat experiment's parser on a
real iperf3 report and a real tcpdump capture (tests/unit/fixtures).
"""

from __future__ import annotations

import io
import json
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from node_agent.clock import ClockEstimate, on_node_clock
from node_agent.config import parse_config
from node_agent.rundir import RunOutcome, write_run_meta
from node_agent.spec import build_spec
from orchestrator.services.ingest import run_points
from orchestrator.timeseries.nodeclock import MAX_OFFSET_S, node_clock
from orchestrator.timeseries.schema import RunContext
from testbed_common.bundle import build_bundle
from testbed_common.states import RunState
from testbed_common.wire import Assignment
from tests.conftest import REPO, experiments
from tests.recorded import tat_result

FIXTURES = REPO / "tests/unit/fixtures"
#: The true (orchestrator) time the recorded transfer started.
TRUE_START = datetime(2026, 11, 22, 2, 0, 5, tzinfo=UTC)
CONFIG = parse_config(
    {"node_id": "se-01", "orchestrator_url": "http://o:8080",
     "netns_container": "testbed-node-se-01",
     "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
                     "server_address": "172.30.1.10"}]},
    {"TESTBED_NODE_TOKEN": "t"},
)
CTX = RunContext(node="se-01", interface="op0", experiment="tat", run="r-1")
MAX_JSON = 16 * 1024**2


def _bundle_files(tmp: Path, clock: ClockEstimate | None) -> dict[str, bytes]:
    """A run's bundle from a node whose clock is ``clock.offset_s`` off, read back as
    ingest reads it (results/ and meta/ members)."""
    skew = timedelta(seconds=clock.offset_s if clock else 0)
    root = tmp / "run"
    (root / "results" / "capture").mkdir(parents=True)
    (root / "results" / "tat.json").write_text(
        json.dumps({**tat_result(), "start": (TRUE_START + skew).isoformat()}))
    (root / "results" / "capture" / "op0.pcap").write_bytes(
        (FIXTURES / "tcp-6mbit-tx.pcap").read_bytes())
    (root / "meta").mkdir()
    (root / "meta" / "system.jsonl").write_text(json.dumps(
        {"time": (TRUE_START + skew).isoformat(), "cpu_pct": 12.0}) + "\n")
    a = Assignment(run_id="r-1", experiment="tat", image="testbed/exp-tat:1",
                   parameters={}, interface="op0", not_before=TRUE_START,
                   deadline=TRUE_START + timedelta(minutes=1), max_bytes=10**7)
    spec = build_spec(on_node_clock(a, clock), CONFIG, interface_address=None, clock=clock)
    write_run_meta(spec, root, RunOutcome(RunState.UPLOADING, "ok"))
    data = build_bundle(root, run_id="r-1", node_id="se-01")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar if m.isfile() and m.name.startswith(("results/", "meta/"))}


def _times(files: dict[str, bytes]) -> dict[str, list[int]]:
    built = run_points(files, CTX, max_json_bytes=MAX_JSON, catalogue=experiments())
    out: dict[str, list[int]] = {}
    for p in built.points:
        out.setdefault(p.measurement, []).append(p.time_ns)
    return out


def test_fast_and_slow_nodes_points_land_at_orchestrator_time(tmp_path: Path) -> None:
    truth = _times(_bundle_files(tmp_path / "true", None))
    assert {"tat", "tat_summary", "flows", "system"} <= truth.keys()
    assert min(truth["tat"]) == round(TRUE_START.timestamp()) * 10**9
    for offset in (300.0, -300.0, 0.25):
        clock = ClockEstimate(offset_s=offset, uncertainty_s=0.003, measured_at=TRUE_START)
        files = _bundle_files(tmp_path / str(offset), clock)
        got = _times(files)
        # results and samples the node stamped on its skewed clock: back on true time
        for m in ("tat", "tat_summary", "system"):
            assert got[m] == truth[m], m
        # the capture's packet times are the node kernel's: moved by the same offset
        # (the fixture's own times are the truth here, so they move by -offset)
        assert got["flows"] == [t - round(offset * 1e9) for t in truth["flows"]]


def test_a_bundle_without_a_clock_record_is_written_as_stamped(tmp_path: Path) -> None:
    files = _bundle_files(tmp_path, None)
    assert json.loads(files["meta/run.json"])["clock"] is None
    old = {n: d for n, d in files.items() if n != "meta/run.json"}  # older agents
    assert _times(old) == _times(files)
    built = run_points(files, CTX, max_json_bytes=MAX_JSON, catalogue=experiments())
    assert not any("clock" in n for n in built.notes)


def test_a_broken_clock_record_moves_nothing_and_says_so(tmp_path: Path) -> None:
    files = _bundle_files(tmp_path, None)
    stamped = _times(files)
    for clock in ({"offset_s": "300"}, {"offset_s": float("nan")},
                  {"offset_s": MAX_OFFSET_S * 2}, "fast"):
        meta = {**json.loads(files["meta/run.json"]), "clock": clock}
        broken = {**files, "meta/run.json": json.dumps(meta).encode()}
        built = run_points(broken, CTX, max_json_bytes=MAX_JSON, catalogue=experiments())
        assert _times(broken) == stamped
        assert any("meta/run.json: clock offset" in n for n in built.notes), built.notes
    unreadable = run_points({**files, "meta/run.json": b"{"}, CTX, max_json_bytes=MAX_JSON,
            catalogue=experiments())
    assert _times({**files, "meta/run.json": b"{"}) == stamped
    assert any(n.startswith("meta/run.json is refused") for n in unreadable.notes)


def test_node_clock_reads_the_agents_record() -> None:
    assert node_clock(None).shift == timedelta(0)
    assert node_clock({"clock": None}).shift == timedelta(0)
    c = node_clock({"clock": {"offset_s": -300, "uncertainty_s": 0.01}})
    assert (c.shift, c.offset_s, c.note) == (timedelta(seconds=300), -300.0, None)
