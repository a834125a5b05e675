"""Proxy mode's decisions from a real influxd (Debian's 1.6.7): a campaign's points,
written as ingest writes them (ABw records through ``abw_points``, modem samples
through ``modem_points``), read back by the planner's query and turned into each SIM's
answer to "is a TAT needed now"; and the same points on the ``abw-proxy`` page, of the
caller's runs only."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orchestrator.bootstrap import timeseries_client
from orchestrator.catalogue.loader import load_catalogue
from orchestrator.catalogue.manifest import proxy_modes
from orchestrator.model.ids import CampaignId, NodeId
from orchestrator.pages.data import Choices, Filters
from orchestrator.pages.html import page_html
from orchestrator.quotas.ledger import SimKey
from orchestrator.scheduling.selection import NodeFacts, SimFacts
from orchestrator.scheduling.snapshot import Campaign
from orchestrator.scheduling.spec import PROXY_MODES, CampaignSpecV2
from orchestrator.services.access import Readable
from orchestrator.services.planhooks import proxy_verdicts as verdicts
from orchestrator.timeseries.influx import InfluxClient
from orchestrator.timeseries.lineprotocol import Point
from orchestrator.timeseries.schema import RunContext, modem_points, point
from studies.abw_proxy.page import abw_proxy_page, proxy_histories
from studies.abw_proxy.rows import campaign_points
from studies.abw_tat.points import abw_points
from studies.tat.points import TAT_SUMMARY
from tests.conftest import REPO
from tests.integration import influxd
from tests.integration.conftest import Api
from tests.pagetables import table_rows

pytestmark = pytest.mark.requires(influxd.available())

T0 = datetime(2026, 11, 22, tzinfo=UTC)
SIMS = (("op0", "240-01", "Telia"), ("op1", "240-07", "Tele2"))


@pytest.fixture
def client() -> Iterator[InfluxClient]:
    with influxd.running() as s, s.client("proxy_test") as c:
        c.create_database()
        yield c


def _store_of(api: Api) -> InfluxClient:
    """A client of the app's own store, with its settings' users."""
    client = timeseries_client(api.settings)
    assert client is not None
    return client


def session(run: str, iface: str, mcc: str, name: str, hour: int, *, tat: bool,
            campaign: str = "c-proxy", start: datetime = T0) -> list[Point]:
    """One abw-tat run at campaign hour ``hour`` from ``start``: a link at 6-10 Mbit/s
    over the day, ABw reading it 10 % low, TAT 5 % high; ``tat`` False: the cheap
    session."""
    ctx = RunContext(node="se-01", operator=mcc, operator_name=name, interface=iface,
                     experiment="abw-tat", campaign=campaign, run=run, session=run)
    t0 = (start + timedelta(hours=hour)).timestamp()
    link = 8e6 + 2e6 * math.sin(hour / 4) + 1e5 * (hour % 3)
    points: list[Point] = []
    steps = (0, 2, 4, 6) if tat else (0, 1, 3, 4)
    for k, step in enumerate(steps):
        rec = {"type": "estimate", "method": "yaz", "start_unix_s": t0 + 40 * k,
               "estimate_bps": link * 0.9 * (1 + 0.01 * k), "latency_s": 0.9,
               "bytes_sent": 400_000, "control_bytes": 2_000, "rtt_s": 0.05}
        points += abw_points([rec], ctx, step=step)
    if tat:
        for k in (0, 1):
            t = int((t0 + 20 + 80 * k) * 1e9)
            points.append(point(TAT_SUMMARY, ctx, {"mean_bps": link * 1.05 * (1 + 0.01 * k),
                                                   "sender_bytes": 12_000_000}, t,
                                direction="uplink"))
    points += modem_points([{"time": (start + timedelta(hours=hour)).isoformat(),
                             "interface": iface, "mcc_mnc": mcc, "operator": name,
                             "rsrp": -95.0, "sinr": 12.0, "band": "3"}], ctx)
    return points


def test_a_sim_with_enough_tats_gets_the_cheap_session_and_one_with_few_a_tat(
        client: InfluxClient) -> None:
    points = [p for h in range(6) for p in session(f"r-t{h}", *SIMS[0], h, tat=True)]
    points += session("r-c6", *SIMS[0], 6, tat=False)
    points += session("r-t0b", *SIMS[1], 0, tat=True)
    client.write(points)
    tats, abws, modems = campaign_points(client, "c-proxy")
    assert len(tats) == 14 and len(abws) == 32 and len(modems) == 8
    assert {a.step for a in abws if a.run == "r-c6"} == {0, 1, 3, 4}

    spec = CampaignSpecV2.model_validate({
        "name": "proxy", "steps": [{"experiment": "abw-tat"}],
        "recurrence": {"kind": "every", "hours": 1, "start": T0.isoformat(),
                       "end": (T0 + timedelta(hours=24)).isoformat()},
        "proxy": {"min_tats": 10, "max_age_hours": 3}},
        context={PROXY_MODES: proxy_modes(load_catalogue(REPO / "experiments"))})
    c = Campaign(CampaignId("c-proxy"), spec, T0)
    node = NodeFacts(NodeId("se-01"), "SE", sims=tuple(SimFacts(*s) for s in SIMS))
    got = verdicts(client, [c], [node], T0 + timedelta(hours=6, minutes=30))
    telia, tele2 = (SimKey(NodeId("se-01"), i, m) for i, m, _ in SIMS)
    assert not got[(c.id, telia)].needed, got[(c.id, telia)].reason
    assert "predicted" in got[(c.id, telia)].reason
    assert got[(c.id, tele2)].needed and "2 TAT(s)" in got[(c.id, tele2)].reason
    # Three campaign hours after Telia's newest TAT (hour 5), its model is too old.
    later = verdicts(client, [c], [node], T0 + timedelta(hours=8, minutes=30))
    assert later[(c.id, telia)].needed and "old" in later[(c.id, telia)].reason


def test_the_page_reads_the_same_points_and_only_the_callers_runs(
        client: InfluxClient) -> None:
    points = [p for h in range(12) for p in session(f"r-t{h}", *SIMS[0], h, tat=True)]
    points += [p for h in range(12, 18) for p in session(f"r-c{h}", *SIMS[0], h, tat=False)]
    client.write(points)
    f = Filters(campaign="c-proxy")
    mine = proxy_histories(client, f, readable=Readable())
    html = page_html(abw_proxy_page(mine, filters=f), filters=f, choices=Choices())
    rows = {r[0]: r for r in table_rows(html, "abw-proxy")}
    telia = rows["se-01 Telia (240-01)"]
    assert telia[1] == "15"  # 24 TATs, held back from the 10th
    assert telia[6:8] == ["12", "6"]
    # 12 full sessions of 2 x 12 MB + 4 x 0.402 MB, 6 cheap ones of 4 x 0.402 MB
    assert telia[8] == f"{(12 * 25.608 + 6 * 1.608):.1f}"
    theirs = proxy_histories(client, f, readable=Readable(runs=frozenset({"r-t0", "r-c12"})))
    (h,) = theirs.values()
    assert [r.run for r in h.runs] == ["r-t0", "r-c12"]


def proxy_campaign(api: Api, t0: datetime) -> dict[str, Any]:
    """An hourly proxy-mode campaign of six windows from ``t0`` (at 6x: 10 min each) on
    se-01's Telia SIM, given a quota; as submitted (its first window booked)."""
    api.client.put("/api/v1/nodes/se-01/interfaces/op0/quota", headers=api.admin,
                   json={"cap_bytes": 10**10, "reset_day": 1, "margin": 0.05})
    r = api.client.post("/api/v1/campaigns", headers=api.admin, json={
        "version": 2, "name": "proxy", "steps": [{"experiment": "abw-tat", "parameters": {
            "run_s": 10, "repetitions": 1, "pause_s": 0}}],
        "recurrence": {"kind": "every", "hours": 1, "start": t0.isoformat(),
                       "end": (t0 + timedelta(hours=6)).isoformat()},
        "time_scale": 6, "time_anchor": t0.isoformat(), "proxy": {"min_tats": 10}})
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def test_through_the_api_a_trusted_proxy_books_the_cheap_session_and_the_ledger_sees_it(
        api_influx: Api) -> None:
    """A proxy-mode campaign on the orchestrator with a real store: its first window
    books the full session (no TAT yet); once the store holds twelve TATs that the
    ABw predicts closely, the next window books the ABw-only session, and the quota
    reserves that session's forecast, not the full one's."""
    api = api_influx
    api.add_node("se-01", [SIMS[0]])
    t0 = api.clock.now().replace(microsecond=0)
    campaign = proxy_campaign(api, t0)
    (first,) = campaign["runs"]  # one window ahead
    assert first["parameters"]["tats"] == 1
    full_bytes = first["reserved_bytes"]
    # Its session, done (cancelled here: the planner books a finished session once).
    assert api.client.post(f"/api/v1/runs/{first['id']}/cancel", headers=api.admin,
                           json={}).status_code == 200
    # Twelve TATs in the store at campaign hours -6 .. -1, the newest an hour old.
    with _store_of(api) as c:
        c.create_database()
        c.write([p for h in range(6) for p in session(
            f"r-t{h}", *SIMS[0], h, tat=True, campaign=campaign["id"],
            start=t0 - timedelta(hours=6))])
    api.clock.advance(60)
    assert api.client.post("/api/v1/plan", headers=api.admin).status_code == 200
    runs = api.client.get(f"/api/v1/campaigns/{campaign['id']}",
                          headers=api.admin).json()["runs"]
    (cheap,) = [r for r in runs if r["id"] != first["id"]]
    assert cheap["parameters"]["tats"] == 0
    assert cheap["reserved_bytes"] < full_bytes / 3
    q = api.client.get("/api/v1/nodes/se-01/interfaces/op0/quota", headers=api.admin).json()
    assert q["reserved"] == cheap["reserved_bytes"]


def test_a_session_whose_results_are_not_in_the_store_yet_holds_its_sims_next_window(
        api_influx: Api) -> None:
    """The proxy's next answer for a SIM must see the session before it: a run that
    ended (uploading) but is not ingested yet still holds its slot, so no pass books the
    next window from the points before it (after a full session that answer was "too
    few TATs": a second full session). Held until its slot's end at the latest: a
    bundle that never comes does not stop the campaign."""
    api = api_influx
    token = api.add_node("se-01", [SIMS[0]])
    campaign = proxy_campaign(api, api.clock.now().replace(microsecond=0))
    cid = campaign["id"]
    (first,) = campaign["runs"]
    with _store_of(api) as c:
        c.create_database()  # the store answers: the campaign has no points yet
    assert [a.run_id for a in api.heartbeat(token).assignments] == [first["id"]]
    for state in ("deploying", "running", "uploading"):
        assert api.report(token, first["id"], state).status_code == 204

    def runs() -> list[dict[str, Any]]:
        api.clock.advance(5)
        assert api.client.post("/api/v1/plan", headers=api.admin).status_code == 200
        got: list[dict[str, Any]] = api.client.get(
            f"/api/v1/campaigns/{cid}", headers=api.admin).json()["runs"]
        return got

    # Ended, its bundle not in: the SIM's next window waits for it.
    assert [r["id"] for r in runs()] == [first["id"]]
    # Its slot over without results: the next window is booked (a full session: the
    # store has no TAT of this campaign).
    deadline = datetime.fromisoformat(first["deadline"].replace("Z", "+00:00"))
    api.clock.advance((deadline - api.clock.now()).total_seconds())
    later = [r for r in runs() if r["id"] != first["id"]]
    assert len(later) == 1 and later[0]["parameters"]["tats"] == 1, later
