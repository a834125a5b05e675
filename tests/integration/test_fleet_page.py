"""The fleet page at fleet scale, on real SQLite and PostgreSQL: the whole fleet
counted first (nodes by health, SIMs near, at or over their cap), then a page of nodes,
those needing a look first, narrowed by the filters the counts link to; a filter it
does not know is refused with what it takes. (At 10,000 nodes one table of every node
and SIM was 40,000 rows: bench/load-RESULTS.md.)"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, update

from orchestrator.model.fleet import HEALTH_ORDER, PAGE_SIZE, sim_classes
from orchestrator.model.health import node_health
from orchestrator.services.context import Context
from orchestrator.services.planning import availability, unavailable_nodes
from orchestrator.services.quotas import (
    SimFigure,
    list_quotas,
    quota_points,
    sim_count,
    sim_figures,
)
from orchestrator.services.views import NodeHealthRow
from orchestrator.settings import HealthSettings
from orchestrator.store.db import Database, make_engine
from orchestrator.store.health import health_rank_sql
from orchestrator.store.tables import Node, Run
from tests.integration.conftest import Api
from tests.pagetables import table_rows

SIM = [("op0", "240-01", "Telia")]


def _page(api: Api, query: str = "") -> str:
    r = api.client.get(f"/pages/fleet{query}", headers=api.admin)
    assert r.status_code == 200, r.text
    return r.text


def _nodes(html: str) -> list[tuple[str, str]]:
    return [(row[0], row[1]) for row in table_rows(html, "nodes")]


def test_the_fleet_is_counted_whole_and_shown_a_page_at_a_time(api: Api) -> None:
    online = [f"se-{i:03d}" for i in range(PAGE_SIZE + 5)]
    for n in online:
        api.add_node(n, SIM)  # registered: heard from now
    never = [f"no-{i:02d}" for i in range(12)]
    for n in never:  # provisioned, their agent never registered
        r = api.client.post("/api/v1/nodes", headers=api.admin, json={"id": n, "country": "NO"})
        assert r.status_code == 201, r.text
    total = len(online) + len(never)

    first = _page(api)
    assert f"Nodes ({total}: 12 new, {len(online)} online)" in first
    assert dict(table_rows(first, "health")) == {
        "offline": "0", "stale": "0", "new": "12", "maintenance": "0",
        "online": str(len(online))}
    # needing a look first (never registered), then the rest by id; a page's worth
    shown = _nodes(first)
    assert shown == ([(n, "new") for n in never]
                     + [(n, "online") for n in online[:PAGE_SIZE - len(never)]])
    assert f"1-{PAGE_SIZE} of {total} (page 1 of 2)" in first
    assert 'href="/pages/fleet?page=2"' in first and "Previous page" not in first
    # the shown nodes' SIMs only, not the fleet's
    assert {row[0] for row in table_rows(first, "sims")} == {n for n, _ in shown if
                                                             n.startswith("se-")}

    second = _page(api, "?page=2")
    assert _nodes(second) == [(n, "online") for n in online[PAGE_SIZE - len(never):]]
    assert "Next page" not in second and 'href="/pages/fleet"' in second

    # the count links to its nodes
    assert 'href="/pages/fleet?health=new"' in first
    assert _nodes(_page(api, "?health=new")) == [(n, "new") for n in never]
    assert _nodes(_page(api, "?node=SE-10")) == [(n, "online") for n in online
                                                 if "se-10" in n]
    assert _nodes(_page(api, "?health=offline")) == []
    # an empty filter, as a form sends it, is no filter
    assert _nodes(_page(api, "?health=&node=&sims=")) == shown


def test_a_filter_the_page_does_not_know_is_refused_with_what_it_takes(api: Api) -> None:
    api.add_node("se-01", SIM)
    for query, says in (("?health=asleep", "health must be one of offline, stale, new, "
                                           "maintenance, online, not 'asleep'"),
                        ("?sims=full", "sims must be one of near-cap, at-cap, overrun, "
                                       "no-cap, not 'full'"),
                        ("?page=0", "page must be 1 or more"),
                        ("?page=two", "page must be a whole number, not 'two'")):
        r = api.client.get(f"/pages/fleet{query}", headers=api.admin)
        assert r.status_code == 400, query
        assert "Bad filter" in r.text and says.replace("'", "&#x27;") in r.text, r.text


def _charge(api: Api, node: str, nbytes: int, *, overrun: int = 0) -> None:
    """A run on the node's op0 that ended and was charged ``nbytes`` this period."""
    run = api.submit(node)
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    with ctx.db.session() as s:
        s.execute(update(Run).where(Run.id == run["id"]).values(
            state="done", measured_bytes=nbytes, charged_bytes=nbytes,
            overrun_bytes=overrun, settled_at=api.clock.now()))


def test_sims_near_at_and_over_their_cap_are_counted_and_found(api: Api) -> None:
    cap = 100_000_000
    for node in ("se-near", "se-at", "se-over", "se-fine"):
        api.add_node(node, SIM)
        r = api.client.put(f"/api/v1/nodes/{node}/interfaces/op0/quota", headers=api.admin,
                           json={"cap_bytes": cap, "reset_day": 1, "margin": 0.0})
        assert r.status_code == 200, r.text
    _charge(api, "se-near", 85_000_000)
    _charge(api, "se-at", 96_000_000)
    _charge(api, "se-over", 110_000_000, overrun=10_000_000)
    _charge(api, "se-fine", 10_000_000)
    api.add_node("se-nocap", [("op9", "240-02", "Tre")])
    api.client.app.state.ctx.settings.scheduling.default_sim_cap_bytes = None  # type: ignore[attr-defined]

    html = _page(api)
    counts = {row[0].split(":")[0]: int(row[1]) for row in table_rows(html, "sim-summary")}
    assert counts == {"near-cap": 1, "at-cap": 2, "overrun": 1, "no-cap": 1}
    assert re.search(r"SIMs \(5; figures of \d+ s ago\)", html), html
    for query, nodes in (("near-cap", ["se-near"]), ("at-cap", ["se-at", "se-over"]),
                         ("overrun", ["se-over"]), ("no-cap", ["se-nocap"])):
        assert f'href="/pages/fleet?sims={query}"' in html
        page = _page(api, f"?sims={query}")
        assert [n for n, _ in _nodes(page)] == nodes, query
        assert [row[0] for row in table_rows(page, "sims")] == nodes, query
    near = table_rows(_page(api, "?sims=near-cap"), "sims")[0]
    assert (near[3], near[4], near[6]) == ("100.00 MB", "85.00 MB", "85%")


def _listed(api: Api) -> dict[tuple[str, str], tuple[bool, int | None, int, int]]:
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    return {(q.node, q.interface): (q.source != "none", q.limit, q.used, q.overrun)
            for q in list_quotas(ctx).sims}


def figures_listed(ctx: Context) -> dict[tuple[str, str], SimFigure]:
    """The old path's answer: the listing's reported SIMs (list_quotas, the ledger over
    ORM rows), as the figures the database sums."""
    return {(q.node, q.interface): SimFigure(q.node, q.interface, q.mcc_mnc, q.operator or "",
                                             q.source != "none", q.limit, q.used,
                                             q.reserved, q.overrun)
            for q in list_quotas(ctx).sims if q.mcc_mnc is not None}


def _counted(api: Api) -> dict[tuple[str, str], tuple[bool, int | None, int, int]]:
    """The SIMs sim_count reads back, checked against the listing: the same count,
    every SIM the listing puts in a class among them, each with the listing's figures."""
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    counted = sim_count(ctx)
    listed = _listed(api)
    assert counted.total == len(listed)
    figures = figures_listed(ctx)
    assert all(figures[(f.node, f.interface)] == f for f in counted.to_look_at)
    got = {(f.node, f.interface): (f.capped, f.limit, f.used, f.overrun)
           for f in counted.to_look_at}
    classed = {k for k, (capped, limit, used, over) in listed.items()
               if sim_classes(capped=capped, limit=limit, used=used, overrun=over)}
    assert classed <= got.keys()
    return got


def _looked_at(listed: dict[tuple[str, str], tuple[bool, int | None, int, int]]
               ) -> dict[tuple[str, str], tuple[bool, int | None, int, int]]:
    """The listed SIMs that may need a look: no cap, 79 % used or more, an overrun."""
    return {k: v for k, v in listed.items()
            if not v[0] or v[3] or (v[1] and v[2] * 100 >= v[1] * 79)}


def mixed_fleet(api: Api) -> None:
    """SIMs whose figures a shortcut could get wrong: caps configured and defaulted, a
    quota set before its interface was reported, other time zones and reset days, an
    overrun, reservations still open (se-01's second SIM, se-02), and a run of the
    period before (a use that would put se-02 over its cap if it were counted)."""
    api.add_node("se-01", [("op0", "240-01", "Telia"), ("op1", "240-07", "Tele2")],
                 timezone="Europe/Stockholm")
    api.add_node("us-01", [("op0", "310-260", "T-Mobile")], timezone="America/New_York")
    api.add_node("se-02", SIM)
    for node, iface, reset in (("se-01", "op0", 15), ("us-01", "op0", 1),
                               ("se-02", "op4", 1)):
        r = api.client.put(f"/api/v1/nodes/{node}/interfaces/{iface}/quota",
                           headers=api.admin,
                           json={"cap_bytes": 10**9, "reset_day": reset, "margin": 0.05})
        assert r.status_code == 200, r.text
    _charge(api, "se-01", 850_000_000)  # near its cap, in its own zone's period
    _charge(api, "us-01", 990_000_000, overrun=40_000_000)
    _charge(api, "se-02", 5_000_000)
    api.submit("se-01", "op1")  # booked, not run: reserved
    api.submit("se-02")
    earlier = api.submit("se-02")  # of the period before: not this period's use
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    with ctx.db.session() as s:
        s.execute(update(Run).where(Run.id == earlier["id"]).values(
            state="done", charged_bytes=7 * 10**12, measured_bytes=7 * 10**12,
            settled_at=api.clock.now(), reservation_period=api.clock.now().replace(
                month=api.clock.now().month - 1, day=1, hour=0)))


def test_the_summarys_sim_figures_are_the_listings(api: Api) -> None:
    """The summary counts from the database's join of caps, interfaces and this
    period's sums (quotas.sim_count), not from the API's listing (list_quotas, 5.6 s of
    CPU at 10,000 nodes): the same count and the same figures of the SIMs that may need
    a look, on the fleet of :func:`mixed_fleet`."""
    mixed_fleet(api)
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    listed = _listed(api)
    assert listed[("se-01", "op0")] == (True, 10**9, 850_000_000, 0)
    assert listed[("se-02", "op0")][2] == 5_000_000
    assert listed[("se-02", "op4")] == (True, 10**9, 0, 0)  # not reported yet
    assert _counted(api) == _looked_at(listed)
    assert _looked_at(listed).keys() == {("se-01", "op0"), ("us-01", "op0")}
    ctx.settings.scheduling.default_sim_cap_bytes = None  # SIMs without a cap
    listed = _listed(api)
    assert listed[("se-01", "op1")] == (False, None, 0, 0)
    assert _counted(api) == _looked_at(listed)


def test_every_sims_figures_and_quota_points_are_the_listings(api: Api) -> None:
    """What the metrics collector's per-SIM series and the planner's quota points read
    (quotas.sim_figures: one query, summed by the database) is the listing's answer for
    every reported SIM, field by field, with a default cap and without one."""
    mixed_fleet(api)
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    seen = []
    for default in (ctx.settings.scheduling.default_sim_cap_bytes, None):
        ctx.settings.scheduling.default_sim_cap_bytes = default
        listed = figures_listed(ctx)
        seen.append(listed)
        assert {(f.node, f.interface): f for f in sim_figures(ctx)} == listed
        points = {(p.tags["node"], p.tags["interface"]): (
            p.tags["operator"], p.tags["operator_name"], p.tags["country"],
            p.fields["used_bytes"], p.fields["reserved_bytes"], p.fields["limit_bytes"])
            for p in quota_points(ctx)}
        assert points == {k: (f.mcc_mnc, f.operator, "SE", f.used, f.reserved, f.limit)
                          for k, f in listed.items()}
    # the fleet has what each figure is there to show
    capped, uncapped = seen
    assert capped[("se-01", "op1")].reserved > 0 and capped[("us-01", "op0")].overrun > 0
    assert capped[("se-02", "op0")].reserved > 0
    assert uncapped[("se-01", "op1")] == SimFigure("se-01", "op1", "240-07", "Tele2", False,
                                                   None, 0, 0, 0)
    assert ("se-02", "op4") not in capped  # a quota without its interface: not a series


def test_health_judged_by_the_database_is_node_health(database_url: str) -> None:
    """store.health's SQL against model.health's rule, on both engines, at each
    boundary: a second either side of stale and offline, never heard, maintenance."""
    settings = HealthSettings()
    now = datetime(2026, 11, 27, 4, tzinfo=UTC)
    beat = settings.heartbeat_interval_s
    silences = {"fresh": 0.0}
    for name, beats in (("stale", settings.stale_after_beats),
                        ("offline", settings.offline_after_beats)):
        for d, side in ((-1e-3, "before"), (0.0, "at"), (1e-3, "after")):
            silences[f"{name}-{side}"] = beats * beat + d
    db = Database(make_engine(database_url))
    with db.session() as s:
        for name, silent in silences.items():
            s.add(Node(id=name, token_hash=name, country="SE", created_at=now,
                       last_heartbeat_at=now - timedelta(seconds=silent)))
        s.add(Node(id="never", token_hash="never", country="SE", created_at=now))
        s.add(Node(id="away", token_hash="away", country="SE", created_at=now,
                   maintenance=True, last_heartbeat_at=now - timedelta(days=9)))
    with db.reading() as s:
        judged = {nid: HEALTH_ORDER[r] for nid, r in s.execute(
            select(Node.id, health_rank_sql(now, settings)))}
        nodes = s.scalars(select(Node)).all()
        rule = {n.id: node_health(now=now, last_heartbeat=n.last_heartbeat_at,
                                  maintenance=n.maintenance, interval_s=beat,
                                  stale_after_beats=settings.stale_after_beats,
                                  offline_after_beats=settings.offline_after_beats).value
                for n in nodes}
    db.engine.dispose()
    assert judged == rule
    assert {judged["stale-before"], judged["stale-at"], judged["offline-before"],
            judged["offline-at"], judged["never"], judged["away"]} == {
        "online", "stale", "offline", "new", "maintenance"}


def test_the_planner_finds_the_nodes_it_may_not_book_as_the_rule_does(api: Api) -> None:
    """services.planning.availability reads only the nodes the database judges
    unbookable (offline, never registered, in maintenance): the same answer as judging
    every node's row, a second either side of offline."""
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    health = ctx.settings.health
    offline_s = health.heartbeat_interval_s * health.offline_after_beats
    silent = {"se-on": 0.0, "se-stale": health.heartbeat_interval_s * health.stale_after_beats,
              "se-nearly": offline_s - 1, "se-off": offline_s, "se-gone": offline_s + 1,
              "se-away": 0.0}
    for node in silent:
        api.add_node(node, SIM)
    r = api.client.post("/api/v1/nodes", headers=api.admin, json={"id": "no-01",
                                                                  "country": "NO"})
    assert r.status_code == 201, r.text
    now = api.clock.now()
    with ctx.db.session() as s:
        for node, seconds in silent.items():
            s.execute(update(Node).where(Node.id == node).values(
                last_heartbeat_at=now - timedelta(seconds=seconds),
                maintenance=node == "se-away"))
        every = [NodeHealthRow(*row) for row in s.execute(
            select(Node.id, Node.last_heartbeat_at, Node.maintenance))]
    found = availability(ctx)
    assert found == frozenset(unavailable_nodes(ctx, every, now).items())
    assert {node for node, _ in found} == {"se-off", "se-gone", "no-01", "se-away"}
