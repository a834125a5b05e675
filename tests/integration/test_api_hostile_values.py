"""Values out of range, non-finite numbers, duplicates, control characters and odd
tokens get a 4xx naming the problem, never a 500 (issue: 217 such requests got one)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.timeseries.lineprotocol import encode_batch
from testbed_common import wire
from testbed_common.bounds import INT64_MAX
from tests.integration.conftest import Api

SIM = [("op0", "240-01", "Telia")]


def raw(api: Api, method: str, path: str, text: str, headers: dict[str, str]) -> Any:
    """Sends ``text`` as the JSON body as is (NaN and Infinity are not JSON, but
    Python's parser takes them)."""
    return api.client.request(method, path, content=text.encode(),
                              headers={**headers, "Content-Type": "application/json"})


def heartbeat(**fields: Any) -> dict[str, Any]:
    return {"sent_at": "2026-11-22T12:00:00Z", "interfaces": [], "disk_free_bytes": 1,
            **fields}


def iface(name: str = "op0", **fields: Any) -> dict[str, Any]:
    return {"name": name, "operator": {"mcc_mnc": "240-01", "name": "Telia"}, **fields}


def assert_refused(r: Any, *needles: str, status: int = 422) -> None:
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str)
    for needle in needles:
        assert needle in detail, detail


def test_integers_beyond_64_bits_are_refused(api: Api) -> None:
    token = api.add_node("se-01", SIM)
    node = api.node(token)
    too_big = INT64_MAX + 1
    quota = "/api/v1/nodes/se-01/interfaces/op0/quota"
    assert_refused(api.client.put(quota, headers=api.admin, json={"cap_bytes": too_big}),
                   "body.cap_bytes")
    assert_refused(api.client.put("/api/v1/projects/default/budget", headers=api.admin,
                                  json={"budget_bytes": too_big}), "body.budget_bytes")
    hb = f"{wire.AGENT_PREFIX}/heartbeat"
    for fields in ({"disk_free_bytes": too_big}, {"spooled_bundles": 2**40},
                   {"interfaces": [iface(rx_bytes=too_big)]}):
        assert_refused(api.client.post(hb, headers=node, json=heartbeat(**fields)))
    r = api.submit("se-01")
    assert_refused(api.client.post(f"{wire.AGENT_PREFIX}/runs/{r['id']}/bundle", headers=node,
                                   json={"size": too_big, "sha256": "0" * 64}), "body.size")
    # the largest value that fits is stored and read back
    assert api.client.put(quota, headers=api.admin,
                          json={"cap_bytes": INT64_MAX}).json()["limit"] == INT64_MAX


def test_non_finite_numbers_are_refused(api: Api) -> None:
    token = api.add_node("se-01", SIM)
    hb = json.dumps(heartbeat()).rstrip("}") + ', "clock_offset_s": NaN}'
    assert_refused(raw(api, "POST", f"{wire.AGENT_PREFIX}/heartbeat", hb, api.node(token)),
                   "NaN is not a JSON number", status=400)
    assert_refused(raw(api, "POST", "/api/v1/users", '{"name": "ann", "token_days": Infinity}',
                       api.admin), "Infinity is not a JSON number", status=400)
    # finite, but past what date arithmetic takes
    assert_refused(raw(api, "POST", "/api/v1/users", '{"name": "ann", "token_days": 1e308}',
                       api.admin), "token_days")
    assert_refused(api.client.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=api.node(token),
                                   json=heartbeat(clock_offset_s=1e300)), "clock_offset_s")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused_in_free_form_parts_too(api: Api, constant: str) -> None:
    """JSON Schema's minimum and maximum let NaN through: a NaN duration was a 500, a NaN
    bin width was stored (and PostgreSQL cannot read it back)."""
    api.add_node("se-01", SIM)
    for param in ("duration_s", "bin_s"):
        body = ('{"experiment": "tat", "node": "se-01", "interface": "op0", '
                f'"parameters": {{"{param}": {constant}}}}}')
        assert_refused(raw(api, "POST", "/api/v1/runs", body, api.admin),
                       f"{constant} is not a JSON number", status=400)
    assert api.client.get("/api/v1/runs", headers=api.admin).json() == []


def test_dates_need_an_offset_and_a_sane_year(api: Api) -> None:
    token = api.add_node("se-01", SIM)
    body = {"experiment": "tat", "node": "se-01", "interface": "op0"}
    for when in ("9999-12-31T23:59:59Z", "2026-11-22T12:00:00", "0001-01-01T00:00:00Z"):
        assert_refused(api.client.post("/api/v1/runs", headers=api.admin,
                                       json={**body, "not_before": when}), "not_before")
        assert_refused(api.client.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=api.node(token),
                                       json=heartbeat(sent_at=when)), "sent_at")


def test_duplicates_are_merged_or_refused(api: Api) -> None:
    r = api.client.post("/api/v1/nodes", headers=api.admin,
                        json={"id": "se-01", "country": "SE", "tags": ["a", "b", "a"]})
    assert r.status_code == 201 and r.json()["node"]["tags"] == ["a", "b"]
    token = r.json()["token"]
    reg = {"agent_version": "t", "interfaces": [iface(), iface()]}
    assert_refused(api.client.post(f"{wire.AGENT_PREFIX}/register", headers=api.node(token),
                                   json=reg), "interface 'op0' is listed twice")
    assert_refused(api.client.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=api.node(token),
                                   json=heartbeat(interfaces=[iface(), iface()])), "twice")
    r = api.client.post("/api/v1/users", headers=api.admin,
                        json={"name": "ann", "projects": ["p1", "p1"]})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("bad", ["Telia\nevil=1", "Tel\x00ia", "x" * 65])
def test_labels_with_control_characters_or_too_long_are_refused(api: Api, bad: str) -> None:
    r = api.client.post("/api/v1/nodes", headers=api.admin, json={"id": "se-01", "country": "SE"})
    token = r.json()["token"]
    reg = {"agent_version": "t", "interfaces": [
        {"name": "op0", "operator": {"mcc_mnc": "240-01", "name": bad}}]}
    assert_refused(api.client.post(f"{wire.AGENT_PREFIX}/register", headers=api.node(token),
                                   json=reg), "operator.name")
    assert_refused(api.client.post("/api/v1/nodes", headers=api.admin,
                                   json={"id": "se-02", "country": "SE", "model": bad}), "model")


def test_ids_in_paths_and_queries_are_bounded(api: Api) -> None:
    for path in ("/api/v1/runs/r-1%0Aevil", "/api/v1/nodes/" + "a" * 100,
                 "/api/v1/nodes/se-01/interfaces/op%200/quota", "/api/v1/runs?node=SE%0A"):
        assert_refused(api.client.get(path, headers=api.admin))


def test_validation_errors_have_the_one_error_shape(api: Api) -> None:
    r = api.client.post("/api/v1/nodes", headers=api.admin, json={"id": "UPPER", "extra": 1})
    assert_refused(r, "body.id", "body.country: Field required", "body.extra")
    r = raw(api, "POST", "/api/v1/nodes", "{not json", api.admin)
    assert_refused(r, "not valid JSON", status=400)
    r = api.client.get("/api/v1/runs", headers=api.admin, params={"limit": "lots"})
    assert_refused(r, "query.limit")


class Encoding:
    """A sink that encodes what it is given as the InfluxDB client does."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, points: Any) -> int:
        self.lines += encode_batch(points).decode().splitlines()
        return len(points)


def test_live_samples_line_protocol_cannot_carry_are_dropped(api: Api) -> None:
    """A sample with a line break in a tag, or a value InfluxDB cannot store, used to sit
    in the live buffer and fail every later write of it, for good."""
    token = api.add_node("se-01", SIM)
    ctx = api.client.app.state.ctx  # type: ignore[attr-defined]
    ctx.timeseries = sink = Encoding()  # live points are kept only with a store
    good = {"time": "2026-11-22T12:00:00+00:00", "interface": "op0", "rssi": -70.0}
    bad = [{**good, "interface": "op0\nevil"}, {**good, "operator": "Telia\\"},
           {**good, "cell_id": 2**70}]
    r = api.client.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=api.node(token),
                        json=heartbeat(metadata={"modems": [*bad, good]}))
    assert r.status_code == 200, r.text
    assert ctx.live.flush(sink) == 1
    [line] = sink.lines
    assert line.startswith("modem,") and "interface=op0" in line and "rssi=-70.0" in line


@pytest.mark.parametrize("field", ["name", "project", "experiment", "nodes"])
def test_campaign_strings_with_nul_or_control_characters_are_refused(
    api: Api, field: str
) -> None:
    """PostgreSQL's text columns cannot hold NUL (it was a 500 there): every string of a
    campaign document that is stored or shown is bounded like the API's own fields."""
    api.add_node("se-01", [("op0", "240-01", "Telia")])
    spec: dict[str, object] = {"version": 2, "name": "ok", "project": "default",
                               "nodes": ["se-01"], "steps": [{"experiment": "tat"}]}
    bad = "de\x00f"
    if field == "experiment":
        spec["steps"] = [{"experiment": bad}]
    elif field == "nodes":
        spec["nodes"] = [bad]
    else:
        spec[field] = bad
    r = api.client.post("/api/v1/campaigns", headers=api.admin, json=spec)
    assert r.status_code == 422, r.text
    assert field in r.json()["detail"]
