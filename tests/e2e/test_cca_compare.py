"""cca-compare through the compose fleet (issue 14, done-means 1): on it-01's Telenor SIM
on a moving train's link (op2, deploy/profiles/no-telenor-train-fleet.yaml: a handover
every 10 s that drops what is in flight), one session of 4 repetitions alternates CUBIC
and BBR over bulk transfers and 1 MB downloads. Every transfer is a point with the
figures of the capture at the sender (the server's, for downlink) and the radio of its
span; the page shows both controls by SINR bin and with and without a handover.

The retransmission and duplicate-ACK counts of every transfer are recomputed here from
the server's capture in the run's bundle, with the reference analysis, and must be the
points' exactly: the figures come from the capture, not from the tool or a model.

Kept short for CI: 10 s bulk transfers (a handover every 10 s still puts at least one in
each) and half-second gaps; one run of 16 transfers, about two minutes. It checks
bookkeeping, not rates, so it runs in phase 1, beside the alert and the hourly campaign
("minutes" group) on a node none of them uses; goodput's runs on it-01 are in phase 2."""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from collections import Counter
from typing import Any

import pytest

from orchestrator.analysis.capture import reference_flows
from tests.e2e.conftest import FINAL, Fleet, SideBySide, story

pytestmark = pytest.mark.e2e

NODE, SIM = "it-01", "op2"
REPETITIONS = 4
PARAMS = {"repetitions": REPETITIONS, "bulk_s": 10, "download_bytes": 1_000_000,
          "gap_s": 0.5, "direction": "downlink"}
TRANSFERS = 4 * REPETITIONS


def _table(page: str, css: str) -> list[list[str]]:
    """The body rows of the page's table of class ``css``, as cell texts."""
    m = re.search(rf'<table class="{css}">(.*?)</table>', page, re.S)
    assert m, f"no table {css} on the page"
    body = m.group(1).split("</thead>")[-1]
    return [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r,
                                                                   re.S)]
            for r in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def _points(fleet: Fleet, run_id: str) -> list[dict[str, Any]]:
    fields = ("index", "status", "retrans_packets", "dupacks", "data_packets", "pure_acks",
              "throughput_bps", "self_delay_s", "sinr_db", "handovers", "cca", "kind")
    columns = ", ".join(f'"{f}"' for f in fields)
    query = f"SELECT {columns} FROM cca_compare WHERE run = '{run_id}'"
    deadline = time.monotonic() + 90
    while len(rows := fleet.influx(query)) < TRANSFERS:
        assert time.monotonic() < deadline, f"run {run_id}: {len(rows)} cca_compare points"
        time.sleep(2)
    return [dict(zip(("time", *fields), r, strict=True)) for r in rows]


def cca_session(fleet: Fleet) -> None:
    fleet.wait_online(NODE)
    started = time.monotonic()
    run_id = fleet.submit(NODE, SIM, "cca-compare", **PARAMS)
    run = fleet.wait(run_id, FINAL, timeout_s=600)
    assert run["state"] == "done", story(run)
    print(f"cca-compare: one session of {TRANSFERS} transfers on {NODE} {SIM} in "
          f"{time.monotonic() - started:.0f} s")
    result = fleet.get(f"/api/v1/runs/{run_id}/result")
    assert [t["error"] for t in result["transfers"]] == [None] * TRANSFERS, result
    # the order is balanced: each control first in half the repetitions
    firsts = Counter(t["cca"] for t in result["transfers"] if t["index"] % 4 == 0)
    assert firsts == {"cubic": 2, "bbr": 2}, firsts

    points = _points(fleet, run_id)
    assert {p["status"] for p in points} == {"ok"}, points
    assert Counter((p["cca"], p["kind"]) for p in points) == {
        (c, k): 4 for c in ("cubic", "bbr") for k in ("bulk", "download")}
    # a bulk transfer spans at least one of the link's handovers (one every 10 s)
    assert all(p["handovers"] >= 1 for p in points if p["kind"] == "bulk"), points
    assert all(p["sinr_db"] is not None and p["self_delay_s"] is not None for p in points)

    # the counts are the sender's capture's: recomputed from the bundle's server capture
    bundle = fleet.http.get(f"/api/v1/runs/{run_id}/bundle")
    assert bundle.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(bundle.content)) as tar:
        [name] = [n for n in tar.getnames() if n.startswith("server/capture/")
                  and n.endswith(".pcap")]
        member = tar.extractfile(name)
        assert member is not None
        flows = reference_flows(member.read()).flows
    by_port = {f.connection.client.port: f for f in flows
               if f.connection.server.port == result["port"]}
    for t, p in zip(result["transfers"], sorted(points, key=lambda p: p["index"]),
                    strict=True):
        f = by_port[t["local_port"]]
        assert not f.data_from_client  # downlink: the server sent, and was captured
        assert (p["retrans_packets"], p["dupacks"], p["data_packets"], p["pure_acks"]) == (
            f.retrans_packets, f.dupacks, f.data_packets, f.pure_acks), (t, p)
    assert sum(p["retrans_packets"] for p in points) > 0  # handovers drop in-flight data

    page = fleet.http.get("/pages/cca-compare", params={"node": NODE})
    assert page.status_code == 200, page.text
    sinr = _table(page.text, "cca-sinr")
    for kind in ("bulk transfers", "downloads"):
        shown = {row[4] for row in sinr if row[2] == kind and row[3].endswith("dB")}
        assert shown == {"cubic", "bbr"}, sinr
    handover = _table(page.text, "cca-handover")
    classes = {(row[3], row[4]) for row in handover}
    assert {("with handover", "cubic"), ("with handover", "bbr"),
            ("without handover", "cubic"), ("without handover", "bbr")} <= classes, handover
    tests = _table(page.text, "significance")
    assert {row[3] for row in tests} == {"throughput", "self-inflicted delay",
                                         "retransmissions", "duplicate ACKs"}, tests
    print(json.dumps({"sinr": sinr, "handover": handover, "tests": tests}))


@pytest.mark.side_by_side("minutes", cca_session)
def test_cca_compare_on_a_train_link_shows_both_controls_by_sinr_and_handover(
        side_by_side: SideBySide) -> None:
    side_by_side.result(cca_session)
