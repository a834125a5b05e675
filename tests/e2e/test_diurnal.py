"""A compressed day on the fleet: one diurnally loaded operator, one flat.

no-01's Telenor link follows the daily load curve on the fleet's compressed clock
(deploy/profiles/no-telenor-fleet.yaml, anchored by scripts/up at
TESTBED_DIURNAL_ANCHOR); se-01's Telia link is flat. An hourly TAT campaign over 24
campaign hours, compressed by the same factor from the same anchor, is written at
campaign time, so the orchestrator's hourly page shows the curve for Telenor and none
for Telia, and the time-of-day analysis finds a daily cycle only for Telenor.

After the day, one short-flows session per operator on the same SIMs shows every
flow's completion time from the node's capture on the short-flows page, beside the
model line (the day leaves no room for a session every 2 campaign hours: see there).

The day runs side by side with test_fault_offline's (conftest's ``SideBySide``), which keeps
se-02 cut from control all day: hence se-01's Telia SIM here, not se-02's.
"""

from __future__ import annotations

import re
import statistics
import time
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.e2e.conftest import FINAL, Fleet, SideBySide, _env, story

pytestmark = pytest.mark.e2e

LOADED, FLAT = ("no-01", "Telenor"), ("se-01", "Telia")
HOURS = 24


class _Boxes(HTMLParser):
    """Each hourly chart's boxes: chart id -> {hour: median} from the SVG's data."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, dict[int, float]] = {}
        self._chart: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg" and (a.get("id") or "").startswith("hourly-"):
            self._chart = a["id"]
            self.charts[self._chart or ""] = {}
        elif tag == "g" and a.get("class") == "box" and self._chart:
            self.charts[self._chart][int(a["data-category"] or "")] = float(
                a["data-median"] or "nan")


def _verdicts(page: str) -> dict[str, str]:
    """Operator name -> the time-of-day table's "Daily cycle?" cell."""
    out = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, flags=re.S):
        cells = [re.sub(r"<[^>]+>", "", c).strip()
                 for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, flags=re.S)]
        for _, name in (LOADED, FLAT):
            if len(cells) > 3 and name in cells[1]:
                out[name] = cells[3]
    return out


def fleet_clock() -> tuple[datetime, float]:
    """The fleet's compressed diurnal clock: its anchor (wall time, set by scripts/up)
    and its compression (campaign seconds per wall second)."""
    profile = yaml.safe_load((REPO / "deploy/profiles/no-telenor-fleet.yaml").read_text())
    anchor = datetime.fromisoformat(_env()["TESTBED_DIURNAL_ANCHOR"].replace("Z", "+00:00"))
    return anchor, float(profile["diurnal"]["compression"])


def compressed_day(fleet: Fleet) -> None:
    """The test below, run side by side with test_fault_offline's day (8 min of wall
    time each, mostly waiting)."""
    anchor, scale = fleet_clock()
    for node, _ in (LOADED, FLAT):
        fleet.wait_online(node)
        r = fleet.http.put(f"/api/v1/nodes/{node}/interfaces/op0/quota",
                           json={"cap_bytes": 2_000_000_000, "reset_day": 1, "margin": 0.05})
        assert r.status_code == 200, r.text
    # The first whole campaign hour at least 30 s of wall time from now.
    now = anchor + (datetime.now(UTC) - anchor) * scale
    start = (now + timedelta(seconds=30 * scale)).replace(minute=0, second=0, microsecond=0)
    start += timedelta(hours=1)
    r = fleet.http.post("/api/v1/campaigns", json={
        "version": 2, "name": "diurnal-day", "nodes": [LOADED[0], FLAT[0]],
        "select": "interface:op0",
        "steps": [{"experiment": "tat", "parameters": {"duration_s": 2}}],
        "recurrence": {"kind": "every", "hours": 1, "start": start.isoformat(),
                       "end": (start + timedelta(hours=HOURS)).isoformat()},
        "time_scale": scale, "time_anchor": anchor.isoformat()})
    assert r.status_code == 201, r.text
    campaign: dict[str, Any] = r.json()
    per_node = {n: [run for run in campaign["runs"] if run["node"] == n]
                for n, _ in (LOADED, FLAT)}
    assert all(len(runs) == HOURS for runs in per_node.values()), campaign["decisions"]

    wall_day_s = HOURS * 3600 / scale
    for runs in per_node.values():
        for run in runs:
            done = fleet.wait(run["id"], FINAL, timeout_s=wall_day_s + 120)
            assert done["state"] == "done", story(done)

    # Every transfer reaches the store, at campaign time (ingest runs every 2 s).
    query = (f"SELECT count(mean_bps) FROM tat_summary WHERE campaign = '{campaign['id']}' "
             "GROUP BY node")
    end = time.monotonic() + 60
    while sum(row[1] for row in fleet.influx(query)) < 2 * HOURS:
        assert time.monotonic() < end, fleet.influx(query)
        time.sleep(2)
    [[first, _]] = fleet.influx(f"SELECT first(mean_bps) FROM tat_summary WHERE "
                                f"campaign = '{campaign['id']}'")
    assert abs(datetime.fromisoformat(first.replace("Z", "+00:00")) - start) < timedelta(hours=1)

    page = fleet.http.get(f"/pages/hourly?campaign={campaign['id']}")
    assert page.status_code == 200, page.text
    boxes = _Boxes()
    boxes.feed(page.text)
    medians = {name: next(v for k, v in boxes.charts.items() if name.lower() in k)
               for _, name in (LOADED, FLAT)}
    for name, by_hour in medians.items():
        assert sorted(by_hour) == list(range(HOURS)), (name, by_hour)
    # Telenor: full capacity at night, ~55 % in the evening busy hour (local time).
    loaded = medians[LOADED[1]]
    night = statistics.median(loaded[h] for h in range(0, 5))
    evening = statistics.median(loaded[h] for h in range(18, 22))
    assert evening < 0.75 * night, loaded
    # nights at full rate: no hour does better (2 s transfers barely tell 0.9 from 1.0)
    assert min(loaded[h] for h in range(0, 5)) >= 0.97 * max(loaded.values()), loaded
    # Telia: flat within a few per cent all day.
    flat = list(medians[FLAT[1]].values())
    assert max(flat) < 1.1 * min(flat), flat

    tod = fleet.http.get(f"/pages/time-of-day?campaign={campaign['id']}")
    assert tod.status_code == 200, tod.text
    verdicts = _verdicts(tod.text)
    assert verdicts[LOADED[1]] == "yes", verdicts
    assert verdicts[FLAT[1]].startswith("no"), verdicts


@pytest.mark.quiet  # the flat operator's hours within 10 % of each other
@pytest.mark.side_by_side("days", compressed_day)
def test_compressed_day_shows_the_loaded_operators_daily_cycle(
        side_by_side: SideBySide) -> None:
    side_by_side.result(compressed_day)


# the day's uplink history makes the forecast; the agent's stop within 2 % of the
# reservation is a deadline (a downlink's packets arrive until it acts)
@pytest.mark.quiet
def test_run_outgrowing_its_forecast_is_held_to_its_reservation(fleet: Fleet) -> None:
    """no-01's Telenor downlink is 4x its uplink, and the link's history holds uplink
    TAT rates only (the day above, and three more here), so a downlink TAT's forecast
    is a fraction of what it moves: the agent (meter and kernel quota) stops it at its
    reservation, and the SIM's use stays under a cap sized to that reservation."""
    node = LOADED[0]
    profile = yaml.safe_load((REPO / "deploy/profiles/no-telenor-fleet.yaml").read_text())
    for _ in range(3):
        run_id = fleet.submit(node, "op0", duration_s=2)
        assert fleet.wait(run_id, FINAL, timeout_s=120)["state"] == "done"
    duration_s = 10
    run_id = fleet.submit(node, "op0", duration_s=duration_s, direction="downlink")
    run = fleet.get(f"/api/v1/runs/{run_id}")
    reserved = run["reserved_bytes"]
    # What the link delivers in the run, at its busiest hour's rate, against the forecast.
    slowest_bps = profile["downlink"]["rate_bps"] * min(profile["diurnal"]["factors"])
    assert reserved < 0.7 * slowest_bps / 8 * duration_s, (reserved, slowest_bps)
    quota = fleet.get(f"/api/v1/nodes/{node}/interfaces/op0/quota")
    cap = int((quota["used"] + quota["reserved"]) / 0.95) + 1  # usable: exactly what is held
    r = fleet.http.put(f"/api/v1/nodes/{node}/interfaces/op0/quota",
                       json={"cap_bytes": cap, "reset_day": 1, "margin": 0.05})
    assert r.status_code == 200, r.text

    try:
        done = fleet.wait(run_id, FINAL, timeout_s=120)
        assert done["state"] == "failed", story(done)
        assert done["reason"].startswith("traffic reservation exceeded"), story(done)
        # Interface counters include link-layer headers the kernel quota (IP bytes) not.
        assert done["measured_bytes"] is not None, story(done)
        assert done["measured_bytes"] <= reserved * 1.02, (done["measured_bytes"], reserved)
        quota = fleet.get(f"/api/v1/nodes/{node}/interfaces/op0/quota")
        assert quota["reserved"] == 0 and quota["used"] <= cap, quota
    finally:  # the other tests' runs on this SIM need a cap with room
        fleet.http.put(f"/api/v1/nodes/{node}/interfaces/op0/quota",
                       json={"cap_bytes": 2_000_000_000, "reset_day": 1, "margin": 0.05})


# --- short-flows on the same two operators ----------------------------------------------
# The day above keeps no-01 and se-01 busy 19 s of every 20 (a 17 s TAT slot and the
# fleet's 2 s padding), so a short-flows session every 2 campaign hours does not fit
# beside it; one session per operator after it shows the whole path instead (image,
# the server's responder, the node's capture, ingest by testbed-flows, the page).


class _FctCharts(HTMLParser):
    """Each completion-time chart's series: chart id -> {series name: marker count}."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, dict[str, int]] = {}
        self._chart: str | None = None
        self._series: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg" and (a.get("id") or "").startswith("fct-"):
            self._chart = a["id"] or ""
            self.charts[self._chart] = {}
        elif tag == "g" and a.get("class") == "series" and self._chart:
            self._series = a.get("data-series") or ""
            self.charts[self._chart][self._series] = 0
        elif tag == "circle" and a.get("class") == "marker" and self._chart and self._series:
            self.charts[self._chart][self._series] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._chart = self._series = None


def test_short_flows_page_shows_every_size_with_the_model_per_operator(fleet: Fleet) -> None:
    """A short-flows session (a 1 MB long flow, downlink) on each operator: every flow
    is found in the node's capture, and the page draws the 11 sizes per operator beside
    the model line (about 40 s of wall time)."""
    r = fleet.http.post("/api/v1/campaigns", json={
        "version": 2, "name": "short-flows", "nodes": [LOADED[0], FLAT[0]],
        "select": "interface:op0", "recurrence": {"kind": "asap"},
        "steps": [{"experiment": "short-flows",
                   "parameters": {"long_bytes": 1_000_000, "gap_s": 0.2}}]})
    assert r.status_code == 201, r.text
    campaign: dict[str, Any] = r.json()
    assert len(campaign["runs"]) == 2, campaign["decisions"]
    for run in campaign["runs"]:
        done = fleet.wait(run["id"], FINAL, timeout_s=180)
        assert done["state"] == "done", story(done)
    query = (f"SELECT count(size_bytes) FROM short_flows WHERE campaign = '{campaign['id']}' "
             "AND status = 'ok' GROUP BY node")
    end = time.monotonic() + 60
    while sum(row[1] for row in fleet.influx(query)) < 2 * 12:
        assert time.monotonic() < end, fleet.influx(
            f"SELECT status, size_bytes, node FROM short_flows WHERE "
            f"campaign = '{campaign['id']}'")
        time.sleep(2)
    page = fleet.http.get(f"/pages/short-flows?campaign={campaign['id']}")
    assert page.status_code == 200, page.text
    charts = _FctCharts()
    charts.feed(page.text)
    for _, name in (LOADED, FLAT):
        [series] = [s for chart, s in charts.charts.items() if name.lower() in chart]
        assert series["measured (median)"] == 11, (name, series)
        assert series["model L(S)"] > 11, (name, series)
