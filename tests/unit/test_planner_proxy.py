"""Proxy mode in the planner: which session each window books, one window ahead per
SIM, and what the quota ledger reserves for it (against an all-TAT campaign)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.analysis.proxy import Verdict
from orchestrator.model.ids import CampaignId, NodeId
from orchestrator.quotas.ledger import SimKey
from orchestrator.scheduling.planner import (
    CalendarEntry,
    EntryStatus,
    Plan,
    SessionKey,
    Snapshot,
)
from tests.unit.test_planner import MB, NOW, hourly, node, run, snap
from tests.unit.test_planner import campaign as any_campaign

TAT_MB, ABW_MB = 24, 3


@dataclass(frozen=True)
class AbwTat:
    """The abw-tat manifest's shape: a TAT of ``TAT_MB`` per half unless ``tats: 0``."""

    interfaces: int = 1
    platforms: tuple[str, ...] = ("linux/amd64",)
    native_tools: bool = False

    def resolve_parameters(self, given: Mapping[str, Any]) -> dict[str, Any]:
        return {"tats": 1, "run_s": 10} | dict(given)

    def forecast(self, parameters: Mapping[str, Any], rate_bps: float) -> tuple[float, int]:
        tats = int(parameters["tats"])
        return 30.0 + tats * 25, (ABW_MB + tats * TAT_MB) * MB


CATALOGUE = {"abw-tat": AbwTat()}
#: The catalogue's proxy modes (experiments/abw-tat/experiment.yaml: proxy.calibration).
PROXY_MODES = {"abw-tat": "tats"}


def campaign(cid: str = "c1", **spec: Any) -> Any:
    """A campaign checked against this catalogue's proxy modes, as a submission is."""
    return any_campaign(cid, proxy_modes=PROXY_MODES, **spec)

STEP = [{"experiment": "abw-tat", "parameters": {"run_s": 10}}]


def psnap(nodes: list[Any], **kw: Any) -> Snapshot:
    return replace(snap(nodes, **kw), catalogue=CATALOGUE)


def proxy_campaign(cid: str = "p1", hours: int = 24, **proxy: Any) -> Any:
    return campaign(cid, steps=STEP, recurrence=hourly(hours), proxy=proxy)


def sim(n: str, iface: str = "op0", mcc: str = "240-01") -> SimKey:
    return SimKey(NodeId(n), iface, mcc)


def verdicts(c: Any, **needed: bool) -> dict[tuple[CampaignId, SimKey], Verdict]:
    ops = {"op0": "240-01", "op1": "240-02"}
    return {(c.id, sim("se-01", i, ops[i])): Verdict(v, "test") for i, v in needed.items()}


def runs_by_sim(p: Plan) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for b in p.bookings():
        out.setdefault(b.interfaces[0], []).append(b)
    return out


def test_without_a_verdict_each_sim_gets_the_full_session_one_window_ahead() -> None:
    c = proxy_campaign()
    p = run(psnap([node("se-01")]), c)
    by = runs_by_sim(p)
    assert sorted(by) == ["op0", "op1"]
    for bookings in by.values():
        (b,) = bookings  # one window ahead, not the day's 24
        assert b.parameters["tats"] == 1 and b.parameters["run_s"] == 10
        assert b.forecast_bytes == (ABW_MB + TAT_MB) * MB
        assert b.start < NOW + timedelta(hours=1)


def test_a_sim_whose_proxy_is_trusted_gets_the_cheap_session_and_reserves_its_bytes() -> None:
    c = proxy_campaign()
    s = psnap([node("se-01")], proxy=verdicts(c, op0=False, op1=True))
    p = run(s, c)
    by = runs_by_sim(p)
    assert by["op0"][0].parameters["tats"] == 0
    assert by["op0"][0].forecast_bytes == ABW_MB * MB
    assert by["op1"][0].parameters["tats"] == 1
    reserved = {k.interface: u.reserved for (k, _), u in p.quotas.sim_usage.items()}
    assert reserved == {"op0": ABW_MB * MB, "op1": (ABW_MB + TAT_MB) * MB}


def test_a_sim_with_a_session_held_gets_nothing_more_until_it_ran() -> None:
    c = proxy_campaign()
    first = run(psnap([node("se-01")]), c)
    held = [CalendarEntry(b.node, b.start, b.end, "run x", EntryStatus.HELD, b.session)
            for b in first.bookings() if b.interfaces == ("op0",)]
    p = run(psnap([node("se-01")], calendar=held), c)
    assert list(runs_by_sim(p)) == ["op1"]


def test_a_day_in_proxy_mode_reserves_a_fraction_of_the_all_tat_campaign() -> None:
    """A compressed walk through 24 hourly windows on one SIM: a pass each hour, the
    session before it done; the proxy asks for a TAT in the first three windows and
    every eighth after. The ledger reserves the cheap sessions' bytes in the rest."""
    nodes = [node("se-01", n_sims=1)]
    c = proxy_campaign()
    full = run(psnap(nodes), campaign("all", steps=STEP,
                                                          recurrence=hourly(24)))
    all_tat = sum(b.forecast_bytes for b in full.bookings())
    assert all_tat == 24 * (ABW_MB + TAT_MB) * MB
    calendar: list[CalendarEntry] = []
    spent = tats = 0
    for hour in range(24):
        now = NOW + timedelta(hours=hour) - timedelta(minutes=1)
        needed = hour < 3 or hour % 8 == 0
        p = run(psnap(nodes, now=now, calendar=calendar,
                     proxy=verdicts(c, op0=needed)), c)
        (b,) = list(p.bookings())
        assert b.session.occurrence == NOW + timedelta(hours=hour)
        assert b.parameters["tats"] == int(needed)
        spent += sum(r.nbytes for r in b.reservations)
        tats += needed
        calendar.append(CalendarEntry(b.node, b.start, b.end, "run", EntryStatus.DONE,
                                      b.session))
    assert tats == 5
    assert spent == 5 * (ABW_MB + TAT_MB) * MB + 19 * ABW_MB * MB
    assert spent < all_tat / 3


def test_proxy_mode_runs_one_abw_tat_step_on_a_recurring_campaign() -> None:
    with pytest.raises(ValidationError, match="proxy mode runs one step"):
        campaign(steps=[{"experiment": "tat"}], recurrence=hourly(), proxy={})
    with pytest.raises(ValidationError, match="recurring campaign"):
        campaign(steps=STEP, proxy={})
    with pytest.raises(ValidationError, match="must measure TAT"):
        campaign(steps=[{"experiment": "abw-tat", "parameters": {"tats": 0}}],
                 recurrence=hourly(), proxy={})
    with pytest.raises(ValidationError, match="min_tats"):
        proxy_campaign(min_tats=5)
    c = proxy_campaign(max_age_hours=3)
    assert c.spec.proxy is not None and c.spec.proxy.cheap_parameters == {"tats": 0}
    assert c.spec.cheap_steps()[0].parameters == {"run_s": 10, "tats": 0}


def test_a_session_key_names_the_sim_the_verdict_was_for() -> None:
    c = proxy_campaign()
    s = psnap([node("se-01")], proxy=verdicts(c, op0=False))
    keys = {b.session for b in run(s, c).bookings()}
    assert {k.interfaces for k in keys} == {("op0",), ("op1",)}
    assert all(isinstance(k, SessionKey) for k in keys)


def test_a_store_that_does_not_answer_leaves_every_window_a_tat_without_back_off() -> None:
    """The planner's lock is held while the answers are read: a store that refuses
    connections is asked once (no back-off sleeps), and no SIM gets an answer, so
    every proxy-mode window books its TAT."""
    import httpx

    from orchestrator.services.planhooks import proxy_verdicts as verdicts
    from orchestrator.timeseries.influx import InfluxClient

    asked: list[str] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        raise httpx.ConnectError("refused", request=request)

    slept: list[float] = []
    store = InfluxClient("http://store:8086", "db", sleep=slept.append,
                         http=httpx.Client(transport=httpx.MockTransport(refuse)))
    cs = [proxy_campaign("p1"), proxy_campaign("p2")]
    assert verdicts(store, cs, [node("se-01")], NOW) == {}
    assert asked == ["/query"] and slept == []
    p = run(psnap([node("se-01")], proxy={}), *cs)
    assert {b.parameters["tats"] for b in p.bookings()} == {1}


def test_proxy_mode_is_the_manifests_and_refused_without_the_catalogue() -> None:
    """Which experiment has a proxy mode, and which parameter calibrates it, is its
    experiment.yaml's (proxy.calibration), not a constant of the scheduler."""
    from orchestrator.catalogue.loader import load_catalogue
    from orchestrator.catalogue.manifest import ManifestError, parse_manifest, proxy_modes
    from tests.conftest import REPO

    assert proxy_modes(load_catalogue(REPO / "experiments")) == PROXY_MODES
    with pytest.raises(ValidationError, match="checked against the experiments' manifests"):
        any_campaign(steps=STEP, recurrence=hourly(), proxy={})
    c = any_campaign(steps=[{"experiment": "x", "parameters": {"full": 2}}],
                     recurrence=hourly(), proxy={}, proxy_modes={"x": "full"})
    assert c.spec.cheap_steps()[0].parameters == {"full": 0}
    text = (REPO / "experiments/abw-tat/experiment.yaml").read_text()
    with pytest.raises(ManifestError, match="proxy.calibration names 'tat', which is not"):
        parse_manifest(text.replace("calibration: tats", "calibration: tat"), source="x")
