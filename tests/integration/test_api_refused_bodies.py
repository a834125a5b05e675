"""Every body a parser refuses is a 4xx that says what is wrong, on every route that
reads a body: the API's JSON routes (read from the app, so a new route is covered as it
is added) and the pages' form. Never a 5xx, never a bare "error" nor FastAPI's "There
was an error parsing the body". The shapes: malformed JSON, a wrong or missing content
type, a JSON value that is not an object, wrong types, oversized fields, invalid UTF-8,
NUL bytes, nesting past the bound, a key twice, a lone surrogate; for the form, missing,
duplicated, oversized and extra fields, invalid UTF-8 and NUL."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from orchestrator.api.app import create_app, declared_routes
from tests.conftest import ManualClock
from tests.integration.conftest import Api, make_settings

#: A valid value for each path parameter, so that a refusal is the body's.
PATH_VALUES = {"run_id": "r-1", "node_id": "se-01", "campaign_id": "c-1", "name": "alice",
               "project": "p1", "token_id": "1", "interface": "op0", "release_id": "rel-1",
               "experiment": "tat", "exclusion_id": "1"}
#: The pages' POST routes that read a form, and those that read no body at all (a new
#: page POST route must be put in one of the two).
FORM_ROUTES = {"/pages/login"}
BODYLESS_PAGE_POSTS = {"/pages/logout", "/pages/campaigns/{campaign_id}/cancel",
                       "/pages/campaigns/{campaign_id}/delete"}
#: Answers that name nothing.
BARE = {"", "error", "Error", "There was an error parsing the body", "Bad Request"}
JSON = "application/json"

#: shape -> (body, content type, a word the answer must hold)
SHAPES: dict[str, tuple[bytes, str | None, str]] = {
    "malformed JSON": (b'{"a": ', JSON, "not valid JSON"),
    "text/plain": (b'{"a": 1}', "text/plain", "Content-Type"),
    "form type": (b"a=1", "application/x-www-form-urlencoded", "Content-Type"),
    "no content type": (b'{"a": 1}', None, "Content-Type"),
    "array": (b"[1, 2]", JSON, "body"),
    "string": (b'"x"', JSON, "body"),
    "null": (b"null", JSON, "body"),
    "invalid UTF-8": (b'{"a": "\xff\xfe"}', JSON, "not UTF-8"),
    "UTF-16": ('{"a": 1}'.encode("utf-16"), JSON, "not UTF-8"),
    "raw NUL": (b'{"a": "x\x00y"}', JSON, "control character"),
    "deep nesting": (b"[" * 5000 + b"]" * 5000, JSON, "nested deeper"),
    "unbalanced": (b"[" * 100_000, JSON, "not JSON"),
    "key twice": (b'{"a": 1, "a": 2}', JSON, "twice"),
    "lone surrogate": (b'{"a": "\\ud800"}', JSON, "surrogate"),
    "escaped NUL": (b'{"a": {"b": ["x\\u0000y"]}}', JSON, "NUL"),
    "NaN": (b'{"a": NaN}', JSON, "finite"),
}


def path_of(template: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[m.group(1)], template)


def json_routes(client: TestClient) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(method, path, the body's JSON schema) of every route that reads a JSON body."""
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for route in declared_routes(client.app):  # type: ignore[arg-type]
        if isinstance(route, APIRoute) and route.body_field is not None:
            for method in sorted(route.methods or ()):
                op = doc["paths"][route.path_format][method.lower()]
                schema = op["requestBody"]["content"][JSON]["schema"]
                schema = schemas[schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema \
                    else schema
                yield method, route.path_format, schema


@pytest.fixture
def app_api(tmp_path: Path, clock: ManualClock) -> Iterator[Api]:
    settings = make_settings(tmp_path)
    app = create_app(settings, clock=clock, reaper=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(client, clock, settings)
    app.state.ctx.db.engine.dispose()


def _detail(r: Any) -> str:
    try:
        return str(r.json()["detail"])
    except (ValueError, KeyError, TypeError):
        m = re.search(r'class="error"[^>]*>([^<]*)<', r.text)
        return html.unescape(m.group(1)) if m else ""


def _refused(r: Any, needle: str, what: str) -> str | None:
    """None when ``r`` is a 4xx whose reason holds ``needle``; else what is wrong."""
    detail = _detail(r)
    if not 400 <= r.status_code < 500 or detail.strip() in BARE or needle not in detail:
        return f"{what}: {r.status_code} {detail[:200]!r} (wanted a 4xx saying {needle!r})"
    return None


def wrong_types(schema: dict[str, Any]) -> dict[str, Any]:
    """A value of the wrong type for every property: a string where a number or a list
    is wanted, a number elsewhere."""
    out: dict[str, Any] = {}
    for name, prop in schema.get("properties", {}).items():
        kinds = {prop.get("type")} | {p.get("type") for p in prop.get("anyOf", [])}
        out[name] = "not-a-number" if kinds & {"integer", "number", "array", "boolean"} \
            else 12345
    return out or {"spec": 12345}


def oversized(schema: dict[str, Any]) -> dict[str, Any]:
    """Every string property 20,000 characters long (past every field's bound)."""
    out = {name: "x" * 20_000 for name, prop in schema.get("properties", {}).items()
           if "string" in {prop.get("type")} | {p.get("type") for p in prop.get("anyOf", [])}}
    return out or {"name": "x" * 20_000}


def test_every_json_route_refuses_every_unparsable_shape_with_a_reason(app_api: Api) -> None:
    routes = list(json_routes(app_api.client))
    assert len(routes) > 15, routes  # the enumeration found the API's body routes
    failures = []
    for method, template, schema in routes:
        path = path_of(template)
        for shape, (body, content_type, needle) in SHAPES.items():
            headers = {**app_api.admin, **({"content-type": content_type}
                                             if content_type else {})}
            r = app_api.client.request(method, path, content=body, headers=headers)
            failures.append(_refused(r, needle, f"{method} {template} {shape}"))
        for shape, doc in (("wrong types", wrong_types(schema)),
                           ("oversized fields", oversized(schema))):
            r = app_api.client.request(method, path, json=doc, headers=app_api.admin)
            named = next(iter(doc))  # every answer names at least the first field
            failures.append(_refused(r, named if r.status_code == 422 else "",
                                     f"{method} {template} {shape}"))
    failures = [f for f in failures if f]
    assert not failures, "\n".join(failures)


def test_the_refusals_are_documented(app_api: Api) -> None:
    doc = app_api.client.get("/openapi.json").json()
    for method, template, _ in json_routes(app_api.client):
        responses = doc["paths"][template][method.lower()]["responses"]
        assert {"400", "415", "422"} <= responses.keys(), (method, template)


#: form body -> a word the 400 must hold
FORMS: dict[bytes, str] = {
    b"": "no 'token' field",
    b"next=%2Fpages": "no 'token' field",
    b"token=a&token=b": "twice",
    b"token=" + b"a" * 10_000: "limit",
    b"token=" + b"a" * 600: "over 512",
    b"token=%FF%FE": "UTF-8",
    b"token=\xff\xfe": "UTF-8",
    b"token=abc%00def": "control character",
    b"&".join(b"f%d=1" % i for i in range(20)): "fields",
}


def test_every_page_post_is_known_and_the_form_refuses_with_a_reason(app_api: Api) -> None:
    posts = {route.path_format for route in declared_routes(app_api.client.app)  # type: ignore[arg-type]
             if isinstance(route, APIRoute) and "POST" in (route.methods or ())
             and route.path_format.startswith("/pages")}
    assert posts == FORM_ROUTES | BODYLESS_PAGE_POSTS
    failures = []
    for template in FORM_ROUTES:
        for body, needle in FORMS.items():
            r = app_api.client.post(template, content=body, follow_redirects=False,
                                    headers={"content-type": "application/x-www-form-urlencoded"})
            failures.append(_refused(r, needle, f"POST {template} {body[:40]!r}"))
            assert "set-cookie" not in r.headers
        r = app_api.client.post(template, content=b'{"token": "x"}', follow_redirects=False,
                                headers={"content-type": JSON})
        failures.append(_refused(r, "x-www-form-urlencoded", f"POST {template} as JSON"))
    # the bodyless ones ignore whatever is sent: never a 5xx
    for template in BODYLESS_PAGE_POSTS:
        for body, content_type, _ in SHAPES.values():
            r = app_api.client.post(path_of(template), content=body, follow_redirects=False,
                                    headers={**app_api.admin, "content-type": content_type or JSON})
            if r.status_code >= 500:
                failures.append(f"POST {template}: {r.status_code}")
    failures = [f for f in failures if f]
    assert not failures, "\n".join(failures)
    # and the form still signs in
    good = app_api.client.post("/pages/login", follow_redirects=False,
                               data={"token": app_api.admin["Authorization"][7:],
                                     "next": "/pages/fleet"})
    assert good.status_code == 303 and good.headers["location"] == "/pages/fleet"


@pytest.mark.parametrize("query", ["node=a%00b", "node=%0d%0aX", "health=%00"])
def test_page_filters_with_control_characters_are_refused(app_api: Api, query: str) -> None:
    r = app_api.client.get(f"/pages/fleet?{query}", headers=app_api.admin)
    assert r.status_code == 422 and "query." in _detail(r), r.text
    assert json.loads(r.text)["detail"]
