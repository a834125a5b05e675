"""short-flows parameters at submission: bad sizes get a 4xx that says what to send, and
a session whose data volume would pass the SIM's cap is refused by the quota checks that
every experiment goes through (the manifest's forecast, reserved before booking)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.conftest import Api

MIB = 1024 * 1024


def _submit(api: Api, **params: Any) -> Any:
    return api.client.post("/api/v1/runs", headers=api.admin, json={
        "experiment": "short-flows", "node": "sf-01", "interface": "op0",
        "parameters": params})


@pytest.fixture()
def node(api: Api) -> str:
    return api.add_node("sf-01", [("op0", "242-01", "Telenor")])


@pytest.mark.parametrize("params,needle", [
    ({"long_bytes": 1000}, "long_bytes"),  # shorter than the largest short flow
    ({"long_bytes": 2 * 1024**3}, "long_bytes"),  # over the responder's 1 GiB
    ({"gap_s": -1}, "gap_s"),
    ({"direction": "sideways"}, "direction"),
    ({"sizes": [1, 2]}, "sizes"),  # the 11 sizes are the protocol's, not a parameter
])
def test_bad_parameters_get_a_4xx_naming_them(api: Api, node: str, params: dict[str, Any],
                                              needle: str) -> None:
    r = _submit(api, **params)
    assert 400 <= r.status_code < 500, r.text
    assert needle in r.text, r.text


def test_the_forecast_reserves_the_flows_volume(api: Api, node: str) -> None:
    r = api.client.put("/api/v1/nodes/sf-01/interfaces/op0/quota", headers=api.admin,
                       json={"cap_bytes": 10**9, "reset_day": 1, "margin": 0.05})
    assert r.status_code == 200, r.text
    r = _submit(api, long_bytes=2 * MIB)
    assert r.status_code == 201, r.text
    # the 11 short flows (776,237 bytes) and the long flow, with 10 % and 100 kB of overhead
    assert r.json()["reserved_bytes"] == int((776_237 + 2 * MIB) * 1.1 + 1e5)


def test_a_session_over_the_sims_cap_is_refused(api: Api, node: str) -> None:
    r = api.client.put("/api/v1/nodes/sf-01/interfaces/op0/quota", headers=api.admin,
                       json={"cap_bytes": 20 * 10**6, "reset_day": 1, "margin": 0.05})
    assert r.status_code == 200, r.text
    r = _submit(api)  # the reference's 20 MiB long flow: ~24 MB, over a 19 MB usable cap
    assert 400 <= r.status_code < 500, r.text
    assert "cap" in r.text, r.text
    assert _submit(api, long_bytes=2 * MIB).status_code == 201  # a small one fits
