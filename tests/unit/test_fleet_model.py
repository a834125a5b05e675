"""The fleet page's decisions (orchestrator.model.fleet): which SIMs need a look, the
SIMs counted, the pages, and the query's parameters checked with a message that says
what each takes. (The nodes' order and paging through the database:
tests/integration/test_fleet_page.py.)"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orchestrator.model.fleet import (
    BadFleetFilter,
    FleetQuery,
    page_of,
    parse_query,
    sim_classes,
    summarise_sims,
)

NOW = datetime(2026, 11, 27, tzinfo=UTC)


@pytest.mark.parametrize(("used", "overrun", "classes"), [
    (0, 0, set()),
    (79_999_999, 0, set()),
    (80_000_000, 0, {"near-cap"}),
    (94_999_999, 0, {"near-cap"}),
    (95_000_000, 0, {"at-cap"}),
    (120_000_000, 20_000_000, {"at-cap", "overrun"}),
])
def test_a_sim_is_near_its_cap_from_80_percent_and_at_it_from_95(
        used: int, overrun: int, classes: set[str]) -> None:
    assert sim_classes(capped=True, limit=100_000_000, used=used, overrun=overrun) == classes


def test_a_sim_without_a_cap_is_said_so_and_a_cap_of_zero_is_no_share() -> None:
    assert sim_classes(capped=False, limit=None, used=5, overrun=0) == {"no-cap"}
    assert sim_classes(capped=True, limit=0, used=0, overrun=0) == set()


def test_pages_start_where_the_page_asks_and_an_empty_fleet_has_one_page() -> None:
    assert page_of(0, 1) == (0, 1)
    assert page_of(100, 1, page_size=100) == (0, 1)
    assert page_of(101, 2, page_size=100) == (100, 2)
    assert page_of(250, 5, page_size=100) == (400, 3)  # beyond the last: shows none


def test_the_sims_are_counted_by_class_and_each_nodes_classes_joined() -> None:
    got = summarise_sims([("a", frozenset({"near-cap"})), ("a", frozenset({"overrun",
                                                                           "at-cap"})),
                          ("b", frozenset()), ("c", frozenset({"no-cap"}))], NOW)
    assert dict(got.counts) == {"near-cap": 1, "at-cap": 1, "overrun": 1, "no-cap": 1}
    assert got.total == 4
    assert dict(got.of_node) == {"a": {"near-cap", "at-cap", "overrun"}, "c": {"no-cap"}}


def test_the_query_string_keeps_the_filters_and_leaves_the_defaults_out() -> None:
    q = FleetQuery(health="offline", node="se 1", page=1)
    assert q.query_string() == "health=offline&node=se+1"
    assert q.query_string(page=2) == "health=offline&node=se+1&page=2"
    assert FleetQuery().query_string() == ""
    assert q.describe() == "offline nodes whose id contains 'se 1'"


def test_parameters_are_checked_and_empty_ones_are_none() -> None:
    assert parse_query(health="", node=" ", sims="", page="") == FleetQuery()
    assert parse_query(health="stale", node="se", sims="no-cap", page="3") == FleetQuery(
        "stale", "se", "no-cap", 3)
    with pytest.raises(BadFleetFilter, match="health must be one of offline, stale, new, "
                                             "maintenance, online, not 'fine'"):
        parse_query(health="fine", node=None, sims=None, page=None)
    with pytest.raises(BadFleetFilter, match="sims must be one of near-cap, at-cap, "
                                             "overrun, no-cap, not 'low'"):
        parse_query(health=None, node=None, sims="low", page=None)
    with pytest.raises(BadFleetFilter, match="page must be 1 or more"):
        parse_query(health=None, node=None, sims=None, page="-1")
