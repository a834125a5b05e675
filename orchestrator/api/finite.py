"""Request bodies are parsed as strict JSON, for every route that takes one; what the
parser refuses is a 4xx that says what is wrong, never a 500 or a bare "error":

- a ``Content-Type`` that is not JSON, or none with a body: 415 ("send Content-Type:
  application/json"); ``curl -d`` sends a form type, and FastAPI passed such a body on
  as bytes, refused with a puzzling "should be a valid dictionary";
- text that is not UTF-8 (RFC 8259 section 8.1; Python's parser also took UTF-16 and
  UTF-32, and answered invalid UTF-8 with a bare "There was an error parsing the
  body");
- nesting deeper than :data:`~testbed_common.untrusted.MAX_JSON_DEPTH` levels, found
  before the parser recurses (``[[[[...`` raised RecursionError, the same bare 400);
- a NUL character (``"\\u0000"``; a raw one is refused by the parser): no id, label or
  text here holds one, and PostgreSQL cannot store it in text or JSON (a 500). Valid
  JSON holding an invalid value, so a 422 naming where, as the schemas' refusals;
- a lone UTF-16 surrogate escape (``"\\ud800"``): no text, and no UTF-8 column or
  file can hold it;
- a key twice in one object (which value counts is the parser's guess);
- ``NaN``, ``Infinity`` and ``-Infinity``, which Python's parser accepts but JSON has
  not. Why here and not in the schemas: free-form parts of a body (a run's
  ``parameters``, a campaign document, live metadata samples) are checked by JSON
  Schema, whose ``minimum`` and ``maximum`` let NaN through (every comparison with NaN
  is false). A NaN duration then failed as a 500, and a NaN stored in a JSON column
  cannot be read by PostgreSQL.

Each (but NUL) is raised as a JSON decode error, which FastAPI turns into a
request-validation error and ``api/errors.py`` into a 400 naming it.
"""

from __future__ import annotations

import email.message
import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from orchestrator.api.errors import COMMON
from testbed_common.untrusted import MAX_JSON_DEPTH, BundleError, nesting_depth


def _refuse(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON number; send a finite number", "", 0)


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise json.JSONDecodeError(f"key {key!r} appears twice in one object; send it "
                                       "once", "", 0)
        out[key] = value
    return out


#: A surrogate escape: rare in real bodies, so only these pay for the full check.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _no_lone_surrogate(value: Any) -> None:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        raise json.JSONDecodeError("a string holds a lone UTF-16 surrogate escape "
                                   f"({e.object[e.start:e.end]!r}); send text", "", 0) from e


def nul_at(value: Any) -> str | None:
    """Where a string (or key) in ``value`` holds NUL (``body.steps.0.name``), or None;
    iterative, as the value may nest up to the depth bound."""
    stack: list[tuple[str, Any]] = [("body", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return where
        elif isinstance(item, dict):
            for key, inner in item.items():
                if "\x00" in key:
                    return f"{where}.{key!r}"
                stack.append((f"{where}.{key}", inner))
        elif isinstance(item, list):
            stack.extend((f"{where}.{n}", inner) for n, inner in enumerate(item))
    return None


def strict_json(body: bytes) -> Any:
    """``body`` parsed as strict JSON, or :class:`json.JSONDecodeError` saying why not."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise json.JSONDecodeError(f"the body is not UTF-8 (byte {e.start}); send UTF-8 "
                                   "JSON", "", e.start) from e
    try:
        depth = nesting_depth(body, stop_after=MAX_JSON_DEPTH)
    except BundleError as e:
        raise json.JSONDecodeError("brackets do not balance: not JSON", "", 0) from e
    if depth > MAX_JSON_DEPTH:
        raise json.JSONDecodeError(f"nested deeper than {MAX_JSON_DEPTH} levels", "", 0)
    try:
        value = json.loads(text, parse_constant=_refuse,
                           object_pairs_hook=_one_value_per_key)
    except RecursionError as e:  # not reached past the depth check; kept as a backstop
        raise json.JSONDecodeError(f"nested too deep: {e}", "", 0) from e
    if _SURROGATE.search(body):
        _no_lone_surrogate(value)
    if b"\\u0000" in body and (where := nul_at(value)) is not None:
        # valid JSON, an invalid value: 422, like the schemas' own refusals
        raise HTTPException(422, f"{where}: a string holds NUL (\\u0000); send text "
                                 "without it")
    return value


class FiniteJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = strict_json(await self.body())
        return self._json


def _json_type(value: str) -> bool:
    message = email.message.Message()
    message["content-type"] = value
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json"))


def wrong_content_type(content_type: str) -> JSONResponse:
    return JSONResponse({"detail": f"the body must be JSON: send 'Content-Type: "
                         f"application/json', not {content_type[:100]!r}"}, status_code=415)


class FiniteJsonRoute(APIRoute):
    """A route whose JSON body is parsed by :class:`FiniteJsonRequest`, and refused with
    415 when its ``Content-Type`` says it is not JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_json = self.body_field is not None

        async def finite(request: Request) -> Response:
            content_type = request.headers.get("content-type")
            if takes_json and not _json_type(content_type or "") and (
                    content_type or request.headers.get("content-length", "0") != "0"):
                return wrong_content_type(content_type or "none")
            return await handler(FiniteJsonRequest(request.scope, request.receive))

        return finite


def api_router(prefix: str, tag: str) -> APIRouter:
    """A router of token-checked API routes: strict JSON bodies, and the error codes
    every such route may answer documented (``errors.COMMON``)."""
    return APIRouter(prefix=prefix, tags=[tag], responses=COMMON, route_class=FiniteJsonRoute)
