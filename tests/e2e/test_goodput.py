"""goodput-sequence through the compose fleet (issue 13, done-means 2): on it-01's TIM
3G SIM (radio promotion 2 s after 5 s idle, deploy/profiles/it-tim-fleet.yaml) the
first transfer after the idle gap lies below the 95 % interval of the median of the
rest for every D <= 256 KB; on its Tele2 SIM (the flat fleet link, no promotion) it is
late by at most a twentieth of the promotion's delay (a few tens of milliseconds of the
machine's own noise, against 2 s).

Cheap on purpose: three sizes (4 KB, 64 KB, 256 KB: the smallest of the reference's
nine, and the claim's largest) and n = 11 (g1 and ten more, whose median's
distribution-free 95 % interval is [x(2), x(9)]), after a 7 s gap (longer than the
profile's 5 s release timer, so every first transfer starts cold). The promotion adds
2 s to a first transfer that otherwise takes 0.2-0.7 s, so ten others already place g1
far below the interval. Six runs booked back to back on a node no other body of the
"days" group uses (203 s on the 2-core machine, 2026-11-26), so it runs side by side
with the compressed days (500 s and more) and adds nothing to the group's wall time."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import FINAL, Fleet, SideBySide, story

pytestmark = pytest.mark.e2e

NODE = "it-01"
RADIO, FLAT = "op0", "op1"  # TIM 3G with promotion delay; Tele2's flat fleet link
SIZES = (4096, 65536, 262144)
PARAMS = {"transfers": 11, "idle_gap_s": 7, "direction": "downlink"}


def results(fleet: Fleet) -> dict[str, dict[int, dict[str, Any]]]:
    """One run per size on each SIM, all booked at once (the node runs them back to
    back): each run's result by interface and D."""
    ids = {(i, d): fleet.submit(NODE, i, "goodput-sequence", size_bytes=d, **PARAMS)
           for i in (RADIO, FLAT) for d in SIZES}
    out: dict[str, dict[int, dict[str, Any]]] = {RADIO: {}, FLAT: {}}
    for (interface, d), run_id in ids.items():
        run = fleet.wait(run_id, FINAL, timeout_s=400)
        assert run["state"] == "done", story(run)
        out[interface][d] = fleet.get(f"/api/v1/runs/{run_id}/result") | {"run": run_id}
    return out


def first_transfers(fleet: Fleet) -> None:
    fleet.wait_online(NODE)
    started = time.monotonic()
    got = results(fleet)
    radio, flat = got[RADIO], got[FLAT]
    if record := os.environ.get("TESTBED_RECORD_GOODPUT"):  # fixtures for the unit tests
        for interface, by_size in got.items():
            for d, doc in by_size.items():
                name = f"fleet-{'3g' if interface == RADIO else 'flat'}-{d}x11.json"
                (Path(record) / name).write_text(json.dumps(
                    {k: v for k, v in doc.items() if k != "run"}, indent=1))
    print(f"goodput-sequence: 6 runs on {NODE} in {time.monotonic() - started:.0f} s")
    for d in SIZES:
        r, f = radio[d]["summary"], flat[d]["summary"]
        print(f"D={d}: 3G g1 {r['g1_bps'] / 1e6:.2f} vs CI {r['ci_low_bps'] / 1e6:.2f}-"
              f"{r['ci_high_bps'] / 1e6:.2f} Mbit/s; flat g1 {f['g1_bps'] / 1e6:.2f} vs CI "
              f"{f['ci_low_bps'] / 1e6:.2f}-{f['ci_high_bps'] / 1e6:.2f} Mbit/s")
        assert radio[d]["format"] == "testbed.goodput-sequence" and radio[d]["version"] == 1
        # 3G: the promotion puts g1 below the interval, by far
        assert r["g1_below_ci"] and r["g1_bps"] < 0.6 * r["ci_low_bps"], r
        # the first transfer waited for the channel: connect() alone took the promotion
        assert radio[d]["transfers"][0]["connect_s"] > 1.5, radio[d]["transfers"][0]
        assert all(t["connect_s"] < 0.5 for t in radio[d]["transfers"][1:])
        assert r["g1_excess_s"] > 1.5, r
        # flat: no promotion, so no delay of its size: g1 late by at most a twentieth of
        # what the promotion cost the 3G SIM's g1 in the same run. Not "g1 inside the
        # interval": on the emulated flat link the ten others' interval is a fraction of
        # a per cent wide, and beside the compressed days on two cores the first
        # transfer after 7 s idle lands 10-40 ms late in some runs (the user-space link's
        # wake-up and the machine's scheduling, not the radio); that failed CI twice.
        assert f["g1_excess_s"] < 0.05 * r["g1_excess_s"], (f, r["g1_excess_s"])
        assert f["g1_bps"] > 0.5 * f["median_bps"], f
        assert flat[d]["transfers"][0]["connect_s"] < 0.5

    # Ingest: every transfer a point, a summary per run; the page draws the boxes
    for doc in [got[i][d] for i in (RADIO, FLAT) for d in SIZES]:
        run_id = doc["run"]
        deadline = time.monotonic() + 60
        while not (rows := fleet.influx(
                f"SELECT count(goodput_bps) FROM goodput WHERE run = '{run_id}'")):
            assert time.monotonic() < deadline, f"run {run_id}'s points never reached InfluxDB"
            time.sleep(2)
        assert rows[0][1] == PARAMS["transfers"]
        [[_, below]] = fleet.influx(
            f"SELECT last(g1_below_ci) FROM goodput_summary WHERE run = '{run_id}'")
        assert below is doc["summary"]["g1_below_ci"]  # the run's own verdict, stored
    page = fleet.http.get("/pages/goodput", params={"node": NODE})
    assert page.status_code == 200, page.text
    boxes = re.findall(r'class="box" data-category="([^"]+)"', page.text)
    assert boxes.count("256 KB") == 2 and boxes.count("4 KB") == 2, boxes  # 3G and flat
    assert len(re.findall(r'class="mark" ', page.text)) == 2 * len(SIZES)


def test_bad_parameters_are_refused_at_submission(fleet: Fleet) -> None:
    """Sizes and counts out of bounds: 422 naming the parameter; a sequence whose
    forecast volume passes the SIM's cap (2 GB on the fleet): the quota ledger's 409."""
    for params, status, words in (
            ({"size_bytes": 100}, 422, "size_bytes"),
            ({"size_bytes": 64 * 1024**2}, 422, "size_bytes"),
            ({"transfers": 5000}, 422, "transfers"),
            ({"transfers": 3}, 422, "transfers"),
            ({"size_bytes": 16 * 1024**2, "transfers": 1001}, 409, "not booked")):
        r = fleet.http.post("/api/v1/runs", json={
            "experiment": "goodput-sequence", "node": NODE, "interface": RADIO,
            "parameters": params})
        assert r.status_code == status and words in r.text, (params, r.status_code, r.text)


@pytest.mark.quiet  # in the "days" group (one phase); g1 is a timing: 10 ms resolution
@pytest.mark.side_by_side("days", first_transfers)
def test_first_transfer_after_idle_is_slow_on_3g_only(side_by_side: SideBySide) -> None:
    side_by_side.result(first_transfers)
