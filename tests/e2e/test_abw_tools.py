"""abw-tools through the compose fleet (issue 14, done-means 2): behind a home gateway
that caps packets per second, the ABw methods probing with 200-byte packets
underestimate, and with 1400-byte ones they do not (after Goga & Teixeira).

it-01's op3 is the gateway's link (deploy/profiles/it-vodafone-home-fleet.yaml: 16 Mbit/s
each way, at most 4,000 packets/s): 200-byte probes get through at 6.4 Mbit/s at most,
so every method at that size must read more than 30 % under TAT, and at 1400 bytes
stay within 15 % of it. se-02's op0 (Telia, 10 Mbit/s, no cap) is the control: there
both sizes are within 15 %, except spruce-like's 200-byte pairs (below). Each cell's
figure is its median over the run's estimates, each against the mean of the TATs on
either side of it.

Spruce-like at 200 bytes on the control link reads the host, not the link: its pairs
leave the link 160 us apart, and the user-space link emulator sends a packet late
whenever the 2-core host runs something else at that moment. A late second packet
reads as cross traffic: one 1 ms late pulls a 100-pair mean down by 6 % of C. On the
machine of 2026-11-27 the cell read +5.8, +5.3 and -8.4 %; on the one of 2026-11-28,
with the same code, -5.6 % to -84.4 % over 15 runs, and with linkem's state files on
a tmpfs still half the runs more than 15 % low (experiments/abw-tools/README.md, "The
control link's 200-byte pairs"). So that cell is held to no bound: the test checks it
was estimated and prints it.

Kept short for CI: three repetitions (each cell three times, in alternating orders,
among four 4 s TATs; spruce-like at 1400 B read -13.9 % once on the uncapped link and
single estimates down to -28 %, so a cell's figure is the median of three) and
pathload-like with short fleets (4 streams, idle 1x a stream): its reference fleets
take a minute an estimate at these rates. It asserts rates, so it runs in phase 2
(``quiet``), alone."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from tests.e2e.conftest import FINAL, Fleet, story

pytestmark = pytest.mark.e2e

PARAMS: dict[str, Any] = {"repetitions": 3, "run_s": 4, "gap_s": 0.3,
                          "pathload_fleet_len": 4, "pathload_idle_factor": 1}
METHODS = ("yaz", "pathload", "spruce")
#: (node, SIM, the link's capacity, which spruce needs)
CAPPED = ("it-01", "op3", 16e6)
UNCAPPED = ("se-02", "op0", 10e6)
#: The control link's cell that the host's timing decides (the module's docstring).
HOST_LIMITED = ("spruce", 200)


def _session(fleet: Fleet, node: str, sim: str, capacity_bps: float) -> dict[str, Any]:
    fleet.wait_online(node)
    started = time.monotonic()
    run_id = fleet.submit(node, sim, "abw-tools", capacity_bps=capacity_bps, **PARAMS)
    run = fleet.wait(run_id, FINAL, timeout_s=300)
    assert run["state"] == "done", story(run)
    result: dict[str, Any] = fleet.get(f"/api/v1/runs/{run_id}/result")
    assert "error" not in result, result.get("error")
    errors = {(c["method"], c["size"]): c["error_median"] for c in result["summary"]}
    print(f"abw-tools on {node} {sim}: {time.monotonic() - started:.0f} s; "
          + json.dumps({f"{m} {s}": round(e, 3) for (m, s), e in errors.items()}))
    print(json.dumps([{k: c[k] for k in ("method", "size", "error_median", "latency_mean_s",
                                           "probe_bytes_mean", "control_bytes_mean",
                                           "overhead_mean")}
                      for c in result["summary"]]))
    result["run_id"] = run_id
    return result


def _errors(result: dict[str, Any]) -> dict[tuple[str, int], float]:
    return {(c["method"], c["size"]): c["error_median"] for c in result["summary"]}


@pytest.mark.quiet  # ABw against TAT within 15 %, and 30 % under it behind the cap
def test_small_probes_underestimate_behind_a_packet_rate_cap(fleet: Fleet) -> None:
    capped = _session(fleet, *CAPPED)
    errors = _errors(capped)
    assert set(errors) == {(m, s) for m in METHODS for s in (200, 1400)}, errors
    for method in METHODS:
        assert errors[(method, 200)] < -0.30, (method, errors)
        assert abs(errors[(method, 1400)]) <= 0.15, (method, errors)
    # the record: every estimate with its probe bytes, the raw output beside it
    assert len(capped["estimates"]) == 18 and len(capped["tats"]) == 4
    assert all(e["probe_bytes"] > 0 for e in capped["estimates"])

    uncapped = _session(fleet, *UNCAPPED)
    control = _errors(uncapped)
    assert set(control) == set(errors), control
    for cell, error in control.items():
        if cell != HOST_LIMITED:
            assert abs(error) <= 0.15, (cell, control)

    # ingest: one abw_tools point per estimate of each run; the page compares both links
    for run_id in (capped["run_id"], uncapped["run_id"]):
        deadline = time.monotonic() + 60
        query = f"SELECT count(\"error\") FROM abw_tools WHERE run = '{run_id}'"
        while not (rows := fleet.influx(query)):
            assert time.monotonic() < deadline, f"run {run_id}'s points never reached InfluxDB"
            time.sleep(2)
        assert rows[0][1] == 18, rows
    page = fleet.http.get("/pages/abw-tools")
    assert page.status_code == 200, page.text
    m = re.search(r'<table class="abw-tools-sizes">(.*?)</table>', page.text, re.S)
    assert m, "no table of small against large probes on the page"
    shown = re.findall(r"<tr>(.*?)</tr>", m.group(1).split("</thead>")[-1], re.S)
    assert len(shown) >= 2 * len(METHODS), shown  # each method on both links
