"""Credentials end when told to: a revoked user token, a rotated node token and a
signed-out pages session stop working on the next request, through the API and the CLI.
"""

from __future__ import annotations

import pytest

from orchestrator.pages.routes import COOKIE
from testbed_common import wire
from tests.integration.conftest import Api
from tests.integration.test_campaign_planner import cli


def _user(api: Api, name: str, project: str = "p1") -> str:
    r = api.client.post("/api/v1/users", headers=api.admin,
                        json={"name": name, "projects": [project]})
    assert r.status_code == 201, r.text
    token: str = r.json()["token"]
    return token


def _me(api: Api, token: str) -> int:
    return api.client.get("/api/v1/me", headers=Api.node(token)).status_code


def _heartbeat(api: Api, token: str) -> int:
    hb = wire.Heartbeat(sent_at=api.clock.now(), interfaces=[], disk_free_bytes=10**9)
    return api.client.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=Api.node(token),
                           json=hb.model_dump(mode="json")).status_code


def test_user_tokens_are_revoked_one_by_one_or_all_at_once(api: Api) -> None:
    first = _user(api, "ana")
    r = api.client.post("/api/v1/users/ana/tokens", headers=api.admin, json={"token_days": 30})
    assert r.status_code == 201, r.text
    second, second_id = r.json()["token"], r.json()["token_id"]
    assert (_me(api, first), _me(api, second)) == (200, 200)
    listed = api.client.get("/api/v1/users/ana/tokens", headers=Api.node(second)).json()
    assert [t["revoked"] for t in listed] == [False, False]  # a user sees their own
    assert all("token" not in t for t in listed)  # never the secrets
    first_id = listed[0]["id"]

    r = api.client.delete(f"/api/v1/users/ana/tokens/{first_id}", headers=api.admin)
    assert r.status_code == 200 and r.json()["revoked"] is True
    assert (_me(api, first), _me(api, second)) == (401, 200)  # that one only, at once

    # another user may neither see nor revoke ana's tokens: she "does not exist" to them
    other = _user(api, "ben", "p2")
    assert api.client.get("/api/v1/users/ana/tokens", headers=Api.node(other)).status_code \
        == 404
    assert api.client.delete(f"/api/v1/users/ana/tokens/{second_id}",
                             headers=Api.node(other)).status_code == 404
    assert _me(api, second) == 200

    r = api.client.delete("/api/v1/users/ana/tokens", headers=api.admin)
    assert r.json() == {"user": "ana", "tokens": 1, "sessions": 0}
    assert _me(api, second) == 401
    assert "revoked" in api.client.get("/api/v1/me", headers=Api.node(second)).json()["detail"]


def test_cli_revokes_user_tokens_and_rotates_a_node_token(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _user(api, "ana")
    issued = cli(api, monkeypatch, "--json", "user", "token", "ana", "--days", "7")
    second = issued.split('"token": "')[1].split('"')[0]
    assert _me(api, second) == 200
    listed = cli(api, monkeypatch, "user", "tokens", "ana")
    assert listed.count("False") == 2
    token_id = issued.split('"token_id": ')[1].split("\n")[0].strip()
    assert cli(api, monkeypatch, "user", "revoke", "ana", "--token", token_id).strip() == \
        f"token {token_id} of ana revoked"
    assert (_me(api, first), _me(api, second)) == (200, 401)
    out = cli(api, monkeypatch, "user", "revoke", "ana")
    assert out.strip() == "ana: 1 token(s) and 0 pages sign-in(s) revoked"
    assert _me(api, first) == 401

    old = api.add_node("se-01", [("op0", "240-01", "Telia")])
    assert _heartbeat(api, old) == 200
    out = cli(api, monkeypatch, "node", "rotate-token", "se-01")
    assert out.startswith("node se-01: old token revoked; its new token (shown once):")
    new = out.strip().splitlines()[-1]
    assert (_heartbeat(api, old), _heartbeat(api, new)) == (401, 200)


def test_node_token_rotation_is_admin_only_and_immediate(api: Api) -> None:
    old = api.add_node("se-01", [("op0", "240-01", "Telia")])
    user = _user(api, "ana")
    assert api.client.post("/api/v1/nodes/se-01/rotate-token",
                           headers=Api.node(user)).status_code == 403
    assert api.client.post("/api/v1/nodes/se-01/rotate-token",
                           headers=Api.node(old)).status_code == 401  # not by the node
    assert _heartbeat(api, old) == 200
    r = api.client.post("/api/v1/nodes/se-01/rotate-token", headers=api.admin)
    assert r.status_code == 200 and r.json()["node"]["id"] == "se-01"
    assert (_heartbeat(api, old), _heartbeat(api, r.json()["token"])) == (401, 200)
    assert api.client.post("/api/v1/nodes/se-99/rotate-token",
                           headers=api.admin).status_code == 404


def _sign_in(api: Api, token: str) -> str:
    api.client.cookies.clear()
    r = api.client.post("/pages/login", content=f"token={token}&next=/pages/fleet",
                        follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/pages/fleet", r.text
    cookie = r.cookies[COOKIE]
    assert cookie != token  # the cookie holds a session, never the token itself
    api.client.cookies.clear()
    return cookie


def _page(api: Api, cookie: str) -> int:
    """The fleet page with this cookie alone (as a copy of it would be sent)."""
    api.client.cookies.clear()
    return api.client.get("/pages/fleet", headers={"Cookie": f"{COOKIE}={cookie}"},
                          follow_redirects=False).status_code


def test_logout_ends_the_session_on_the_server(api: Api) -> None:
    token = _user(api, "ana")
    cookie = _sign_in(api, token)
    kept = _sign_in(api, token)  # the same user in another browser
    assert (_page(api, cookie), _page(api, kept)) == (200, 200)
    r = api.client.post("/pages/logout", headers={"Cookie": f"{COOKIE}={cookie}"},
                        follow_redirects=False)
    assert r.status_code == 303
    assert _page(api, cookie) == 303  # a copy of the cookie is dead too
    assert _page(api, kept) == 200  # only that session ended
    assert _me(api, token) == 200  # and not the token


def test_a_session_ends_with_the_token_it_was_opened_with(api: Api) -> None:
    token = _user(api, "ana")
    cookie = _sign_in(api, token)
    api.client.delete("/api/v1/users/ana/tokens", headers=api.admin)
    assert _page(api, cookie) == 303
    # an admin's session (opened with the admin token) ends when the admin revokes it
    admin_cookie = _sign_in(api, api.admin["Authorization"][7:])
    assert _page(api, admin_cookie) == 200
    r = api.client.delete("/api/v1/users/admin/tokens", headers=api.admin)
    assert r.json()["sessions"] == 1
    assert _page(api, admin_cookie) == 303


def test_a_session_expires(api: Api) -> None:
    from orchestrator.services.sessions import SESSION_S

    cookie = _sign_in(api, _user(api, "ana"))
    api.clock.advance(SESSION_S - 1)
    assert _page(api, cookie) == 200
    api.clock.advance(2)
    assert _page(api, cookie) == 303
