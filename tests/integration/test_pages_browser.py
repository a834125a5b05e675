"""The dashboard pages in a real browser, over a real InfluxDB.

A synthetic campaign is written into a throwaway influxd with the project's own
time-series code: four days of hourly ABw-TAT-ABw sessions on two Swedish nodes, each
with two operators, one whose TAT rate dips in the local evening (a diurnal load) and
one flat. Time is compressed by writing the points with their timestamps rather than
waiting for them: the pages cannot tell. The orchestrator app (``create_app``) serves
the pages with uvicorn on a loopback port and headless Chromium opens them: the test
reads the charts back from the DOM (boxes, points, lines, axis labels), checks the
hourly pattern is visible where it exists and only there, that a campaign with no data
says so, and saves screenshots (``PAGES_SCREENSHOT_DIR`` keeps them for a look).
"""

from __future__ import annotations

import math
import os
import random
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import pytest
import uvicorn

from orchestrator.api.app import create_app
from orchestrator.bootstrap import timeseries_client
from orchestrator.pages.routes import COOKIE
from orchestrator.timeseries.influx import InfluxClient
from orchestrator.timeseries.lineprotocol import Point
from orchestrator.timeseries.schema import RunContext, point
from studies.abw_tat.points import ABW
from studies.tat.points import TAT, TAT_SUMMARY
from testbed_common import wire
from tests.integration import influxd
from tests.integration.conftest import ADMIN, make_settings
from tests.integration.live import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.requires(
    influxd.available(),
    None if CHROMIUM else "chromium not installed (apt-get install chromium)",
)

CAMPAIGN = "c-synth"
DAYS = 4
NODES = ("se-01", "se-02")
ZONE = "Europe/Stockholm"
LOADED = ("240-01", "Telia SE")  # rate dips in the local evening
FLAT = ("240-07", "Tele2 SE")
METHODS = ("spruce", "pathload")  # ABW1 before the TAT, ABW2 after it
BINS = 20  # 100 ms TAT bins per transfer: 2 s of a transfer is enough for the pages


def loaded_rate(local_hour: int) -> float:
    """30 Mbit/s, down to 12 at 20:00 local (a Gaussian evening busy hour, sd 2.5 h)."""
    busy = math.exp(-((local_hour - 20) ** 2) / (2 * 2.5**2))
    return 30e6 * (1 - 0.6 * busy)


def campaign_points(start: datetime) -> list[Point]:
    rng = random.Random(7)
    points: list[Point] = []
    zone = ZoneInfo(ZONE)
    for node in NODES:
        for (mcc_mnc, name), loaded in ((LOADED, True), (FLAT, False)):
            iface = "op0" if loaded else "op1"
            for h in range(DAYS * 24):
                t = start + timedelta(hours=h)
                local_hour = t.astimezone(zone).hour
                rate = (loaded_rate(local_hour) if loaded else 20e6) * rng.uniform(0.95, 1.05)
                session = f"s-{node}-{iface}-{h}"

                def ctx(experiment: str, run: str, *, node: str = node, mcc_mnc: str = mcc_mnc,
                        name: str = name, iface: str = iface, session: str = session
                        ) -> RunContext:
                    return RunContext(node=node, country="SE", operator=mcc_mnc,
                                      operator_name=name, interface=iface, rat="4G",
                                      experiment=experiment, campaign=CAMPAIGN, run=run,
                                      session=session)

                t_ns = int(t.timestamp()) * 10**9
                for k, method in enumerate(METHODS):  # ABW1 at t, ABW2 at t + 50 s
                    run = f"{session}-abw{k + 1}"
                    for rep in range(4):
                        points.append(point(ABW, ctx("abw", run), {
                            "estimate_bps": rate * rng.uniform(0.7, 1.1),
                            "latency_s": rng.uniform(0.8, 1.6), "bytes": 150_000,
                            "packets_sent": 100},
                            t_ns + (50 * k + rep) * 10**9, method=method,
                            direction="uplink"))
                tat_ns = t_ns + 20 * 10**9
                run = f"{session}-tat"
                for b in range(BINS):
                    points.append(point(TAT, ctx("tat", run), {
                        "bps": rate * rng.uniform(0.9, 1.1), "bytes": int(rate * 0.1 / 8),
                        "duration_s": 0.1}, tat_ns + b * 10**8, direction="uplink"))
                volume = int(rate * 10 / 8)  # a 10 s transfer
                points.append(point(TAT_SUMMARY, ctx("tat", run), {
                    "mean_bps": rate, "bytes": volume, "sender_bytes": volume,
                    "duration_s": 10.0, "bins": 100}, tat_ns, direction="uplink"))
    return points


@dataclass
class Served:
    url: str
    shots: Path
    profile: Path


class DomReader(HTMLParser):
    """Elements of a dumped DOM as (tag, attributes), plus all text, for assertions."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.texts.append(data.strip())

    def having(self, tag: str, cls: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and cls in a.get("class", "").split()]

    @property
    def text(self) -> str:
        return "\n".join(self.texts)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("pages")
    with influxd.running() as server:
        # The pages read the store the app builds from its settings (ctx.timeseries), as
        # the reader; the points go in as the writer, as ingest writes them.
        settings = make_settings(root).model_copy(update={"influx": server.settings("pages")})
        ts = timeseries_client(settings)
        assert ts is not None
        start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) \
            - timedelta(days=DAYS)
        with ts:
            assert ts.write(campaign_points(start)) > 0
        app = create_app(settings, reaper=False)
        port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                ws="none", lifespan="on")
        web = uvicorn.Server(config)
        thread = threading.Thread(target=web.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not web.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        admin = {"Authorization": f"Bearer {ADMIN}"}
        for node in NODES:
            r = httpx.post(f"{url}/api/v1/nodes", headers=admin, timeout=30,
                           json={"id": node, "country": "SE", "timezone": ZONE})
            assert r.status_code == 201, r.text
        shots = Path(os.environ.get("PAGES_SCREENSHOT_DIR") or root / "shots")
        shots.mkdir(parents=True, exist_ok=True)
        try:
            yield Served(url, shots, root / "chromium-profile")
        finally:
            web.should_exit = True
            thread.join(timeout=15)
            app.state.ctx.db.engine.dispose()
            if isinstance(app.state.ctx.timeseries, InfluxClient):
                app.state.ctx.timeseries.close()


def chromium(served: Served, *args: str) -> str:
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--no-first-run", "--disable-extensions", "--disable-background-networking",
         f"--user-data-dir={served.profile}", "--window-size=1400,1000", *args],
        capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def open_page(served: Served, path: str, shot: str | None = None) -> DomReader:
    """The page's DOM after signing in with ``?token=`` (which redirects to the page
    itself and leaves a cookie); a screenshot too when ``shot`` names one."""
    sep = "&" if "?" in path else "?"
    url = f"{served.url}{path}{sep}token={ADMIN}"
    if shot:
        chromium(served, f"--screenshot={served.shots / shot}", url)
        assert (served.shots / shot).stat().st_size > 10_000
    return DomReader(chromium(served, "--dump-dom", url))


def test_hourly_page_shows_the_diurnal_operator_and_the_flat_one(served: Served) -> None:
    dom = open_page(served, f"/pages/hourly?campaign={CAMPAIGN}", "hourly.png")
    charts = dom.having("svg", "chart")
    assert len(charts) == 2 and all(c["role"] == "img" for c in charts)
    boxes = dom.having("g", "box")
    assert len(boxes) == 2 * 24  # every hour of both operators has transfers
    assert {b["data-n"] for b in boxes} == {str(DAYS * len(NODES))}
    assert "TAT mean rate (Mbit/s)" in dom.text
    assert "Hour of day (node local time)" in dom.text
    assert "No known time zone" not in dom.text

    # Boxes come chart by chart, in operator-label order: Telia's, then Tele2's (sorted).
    by_chart = {label: boxes[i * 24:(i + 1) * 24]
                for i, label in enumerate(sorted([f"{LOADED[1]} ({LOADED[0]})",
                                                  f"{FLAT[1]} ({FLAT[0]})"]))}
    loaded = [float(b["data-median"]) for b in by_chart[f"{LOADED[1]} ({LOADED[0]})"]]
    flat = [float(b["data-median"]) for b in by_chart[f"{FLAT[1]} ({FLAT[0]})"]]
    assert max(loaded) - min(loaded) > 5 * (max(flat) - min(flat))
    assert loaded.index(min(loaded)) == 20  # the busy hour, in local time
    assert min(loaded) == pytest.approx(loaded_rate(20) / 1e6, rel=0.1)


def test_daily_abw_tat_and_time_of_day_pages(served: Served) -> None:
    q = f"?campaign={CAMPAIGN}"
    daily = open_page(served, f"/pages/daily{q}", "daily.png")
    assert len(daily.having("polyline", "line")) == 2
    markers = daily.having("circle", "marker")
    assert DAYS * 2 <= len(markers) <= (DAYS + 1) * 2  # a window of 4 days spans 5 dates
    assert "Daily mean TAT rate (Mbit/s)" in daily.text

    abw = open_page(served, f"/pages/abw-tat{q}", "abw-tat.png")
    transfers = DAYS * 24 * len(NODES) * 2
    assert len(abw.having("circle", "point")) == transfers * len(METHODS)
    assert len(abw.having("path", "cdf")) == 2 * len(METHODS)
    assert len(abw.having("svg", "chart")) == 1 + 1 + 1  # SE/Telia, SE/Tele2, the CDF
    assert "ABw estimate (Mbit/s)" in abw.text and "RD (fraction of TAT)" in abw.text

    tod = DomReader(chromium(served, "--dump-dom",
                             f"{served.url}/pages/time-of-day{q}&token={ADMIN}"))
    table = [a for t, a in tod.elements if t == "table"]
    assert table and "significance" in table[0]["class"]
    text = tod.text
    for node in NODES:
        assert node in text
    # Verdict column: the loaded operator's series have a daily cycle, the flat ones not.
    assert text.count("\nyes\n") == len(NODES) and text.count("\nno\n") == len(NODES)


def test_filters_no_data_and_sign_in(served: Served) -> None:
    one = open_page(served, f"/pages/hourly?campaign={CAMPAIGN}&operator={FLAT[0]}"
                            f"&node={NODES[0]}")
    assert len(one.having("g", "box")) == 24
    assert {b["data-n"] for b in one.having("g", "box")} == {str(DAYS)}

    empty = open_page(served, "/pages/hourly?campaign=c-none", "empty.png")
    assert "No TAT measurements for campaign c-none yet." in empty.text
    assert not empty.having("svg", "chart")

    index = open_page(served, "/")
    links = {a["href"] for t, a in index.elements if t == "a"}
    assert {"/pages/hourly", "/pages/daily", "/pages/abw-tat", "/pages/time-of-day"} <= links

    # Without a token the browser lands on the sign-in form, and the form signs in.
    fresh = Served(served.url, served.shots, served.profile.with_name("fresh-profile"))
    login = DomReader(chromium(fresh, "--dump-dom", f"{served.url}/pages/daily"))
    assert "Sign in" in login.text
    assert any(a.get("name") == "token" for t, a in login.elements if t == "input")
    with httpx.Client(base_url=served.url, timeout=30) as c:
        r = c.post("/pages/login", content=f"token={ADMIN}&next=/pages/daily",
                   headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert r.status_code == 303 and r.headers["location"] == "/pages/daily"
        cookie = r.headers["set-cookie"]
        assert f"{COOKIE}=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
        page = c.get("/pages/daily?campaign=c-none")
        assert page.status_code == 200 and "script-src" not in page.headers[
            "content-security-policy"] and "default-src 'none'" in page.headers[
            "content-security-policy"]
        assert c.post("/pages/logout").status_code == 303
        assert c.get("/pages/daily").status_code == 303  # signed out: back to the form
        bad = c.post("/pages/login", content="token=wrong&next=//evil.example/")
        assert bad.status_code == 401 and 'value="/"' in bad.text  # no open redirect


def test_campaigns_page_shows_why_sessions_were_not_booked(served: Served) -> None:
    """A campaign on a node in maintenance: the planner defers its sessions and the
    campaigns page says so, with the reason, as the API and the CLI do."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=served.url, timeout=30) as c:
        r = c.post("/api/v1/nodes", headers=admin,
                   json={"id": "se-09", "country": "SE", "timezone": ZONE})
        assert r.status_code == 201, r.text
        reg = wire.Registration(agent_version="test", interfaces=[wire.InterfaceReport(
            name="op0", operator=wire.Operator(mcc_mnc="240-01", name="Telia"))])
        r = c.post(f"{wire.AGENT_PREFIX}/register", json=reg.model_dump(mode="json"),
                   headers={"Authorization": f"Bearer {r.json()['token']}"})
        assert r.status_code == 200, r.text
        r = c.put("/api/v1/nodes/se-09/maintenance", headers=admin,
                  json={"maintenance": True, "reason": "antenna swap"})
        assert r.status_code == 200, r.text
        start = datetime.now(UTC) + timedelta(hours=1)
        r = c.post("/api/v1/campaigns", headers=admin, json={
            "version": 2, "name": "held-back", "nodes": ["se-09"],
            "steps": [{"experiment": "tat", "parameters": {"duration_s": 5}}],
            "recurrence": {"kind": "every", "hours": 1, "start": start.isoformat(),
                           "end": (start + timedelta(hours=3)).isoformat()}})
        assert r.status_code == 201, r.text
        campaign = r.json()
    [decision] = campaign["decisions"]
    assert (decision["kind"], decision["code"]) == ("deferred", "node_unavailable")

    dom = open_page(served, "/pages/campaigns", "campaigns.png")
    [table] = dom.having("table", "decisions")
    assert table is not None
    text = dom.text
    assert f"held-back ({campaign['id']})" in text
    assert "node_unavailable" in text and decision["message"] in text
    assert "Runs: no runs booked." in text
    assert not dom.having("form", "filters")  # the campaigns list takes no filters
    # its owner (here the administrator) gets Cancel and Delete buttons: POST forms
    actions = {a.get("action") for a in dom.having("form", "action")}
    assert actions == {f"/pages/campaigns/{campaign['id']}/cancel",
                       f"/pages/campaigns/{campaign['id']}/delete"}


def test_fleet_page_puts_nodes_needing_a_look_first(served: Served) -> None:
    """A node that heartbeats is online; nodes that never did are offline and listed
    first; every SIM shows its cap and use."""
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with httpx.Client(base_url=served.url, timeout=30) as c:
        r = c.post("/api/v1/nodes", headers=admin,
                   json={"id": "se-10", "country": "SE", "timezone": ZONE,
                         "model": "apu2"})
        assert r.status_code == 201, r.text
        node = {"Authorization": f"Bearer {r.json()['token']}"}
        # three modems, two of one model; the node has no gpsd running
        reg = wire.Registration(agent_version="0.1.0", architecture="arm64", interfaces=[
            wire.InterfaceReport(name=name, operator=wire.Operator(mcc_mnc=mcc_mnc, name=op),
                                 modem_model=model)
            for name, mcc_mnc, op, model in (
                ("op0", "240-01", "Telia", "Quectel EM12-G"),
                ("op1", "240-07", "Tele2", "Quectel EM12-G"),
                ("op2", "240-02", "Tre", "Sierra Wireless EM7565"))])
        assert c.post(f"{wire.AGENT_PREFIX}/register", json=reg.model_dump(mode="json"),
                      headers=node).status_code == 200
        no_gps = {"gps": "cannot reach gpsd at 127.0.0.1:2947: [Errno 111] Connection refused"}
        hb = wire.Heartbeat(sent_at=datetime.now(UTC), interfaces=reg.interfaces,
                            disk_free_bytes=7 * 10**9, clock_offset_s=0.004,
                            metadata=wire.LiveMetadata(unavailable=no_gps))
        assert c.post(f"{wire.AGENT_PREFIX}/heartbeat", json=hb.model_dump(mode="json"),
                      headers=node).status_code == 200

    dom = open_page(served, "/pages/fleet", "fleet.png")
    assert dom.having("table", "nodes") and dom.having("table", "sims")
    text = dom.texts
    rows = [t for t in text if t.startswith("se-")]
    assert "se-10" in rows and rows.index("se-10") > rows.index(NODES[0])  # online last
    i = text.index("se-10")
    assert text[i + 1:i + 3] == ["online", text[i + 2]] and text[i + 2].endswith("s ago")
    assert "apu2" in text and "0.1.0" in text and "7.00 GB" in text
    assert "Telia (240-01)" in text and "10.00 GB" in text  # the SIM's (default) cap
    assert text[i + 3:i + 7] == ["SE", "apu2", "arm64", "0.1.0"], text[i:i + 12]
    assert text[i + 7] == "3 modems: 2x Quectel EM12-G, Sierra Wireless EM7565"
    assert text[i + 9] == ("gps: unavailable (cannot reach gpsd at 127.0.0.1:2947: "
                            "[Errno 111] Connection refused)")
    assert any(t.startswith("Nodes (") and "1 online" in t and "new" in t for t in text)
