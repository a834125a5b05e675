"""Refuses, before a byte of the body is read, what no route would accept.

FastAPI reads and parses a request's body before it runs the route's dependencies, the
token check among them: a 50 MB JSON body without a token cost 300 MB of memory before
its 401. This ASGI middleware runs first and answers

- 401 when the route needs a bearer token and the request carries none, or one that is
  not printable ASCII (whether the token is *valid* is still the route's dependency's
  question: it needs the database);
- 413 when the body is over the route's cap: at once when ``Content-Length`` says so,
  and as soon as a streamed (chunked) body passes the cap, without reading further.

Which routes need a token is read from the app's routes themselves: a route whose
dependencies include the ``Token`` security scheme (which
:func:`~orchestrator.api.deps.bearer` declares) needs one, so a new route cannot be
forgotten here. These are the routes and the schemes the OpenAPI document lists, so
what is documented is what is enforced (tests/integration/test_guard_document.py holds the two
equal); the document itself is not built for it: that took 0.6 s of CPU at each
replica's start, before it could serve (bench/RESULTS.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security.base import SecurityBase
from starlette.datastructures import Headers
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from orchestrator.services.auth import bearer_token, well_formed

MISSING_TOKEN = (
    "missing or malformed token: send 'Authorization: Bearer <token>' (an API token; "
    "node agents send their node token)"
)
_LENGTH = re.compile(r"[0-9]{1,19}")


@dataclass(frozen=True)
class Rule:
    """What one route accepts before its handler runs."""

    methods: frozenset[str]
    path: re.Pattern[str]
    needs_token: bool
    max_body_bytes: int

    def matches(self, method: str, path: str) -> bool:
        return method in self.methods and self.path.match(path) is not None


def _path_regex(template: str) -> re.Pattern[str]:
    """``/api/v1/runs/{run_id}`` -> a regex matching one segment per parameter."""
    parts = re.split(r"\{[^}/]+\}", template)
    return re.compile("^" + "[^/]+".join(re.escape(p) for p in parts) + "$")


@dataclass(frozen=True)
class Operation:
    """One documented operation: its method, its path template, and the names of the
    security schemes it declares."""

    method: str
    template: str
    schemes: frozenset[str]


def _schemes(dependant: Dependant) -> Iterator[str]:
    """The security schemes among a route's dependencies, however deeply nested (as
    FastAPI's OpenAPI document collects them)."""
    for dep in dependant.dependencies:
        # Typed as a plain callable; the security schemes (HTTPBearer and the like) are
        # callable subclasses of SecurityBase, which mypy does not see as callable.
        call: object = dep.call
        if isinstance(call, SecurityBase):
            yield call.scheme_name
        yield from _schemes(dep)


def operations(routes: Iterable[BaseRoute]) -> list[Operation]:
    """The app's documented operations (routes in its OpenAPI schema), read from the
    routes."""
    return [Operation(method.upper(), route.path_format, frozenset(_schemes(route.dependant)))
            for route in routes
            if isinstance(route, APIRoute) and route.include_in_schema
            for method in sorted(route.methods or ())]


def rules_for(
    ops: Iterable[Operation], *, scheme: str, default_max_body_bytes: int,
    max_body_bytes: Mapping[tuple[str, str], int],
) -> list[Rule]:
    """One rule per documented operation: it needs a token when it declares ``scheme``;
    its body cap is ``max_body_bytes[(METHOD, path template)]``, else the default."""
    return [Rule(methods=frozenset({op.method}), path=_path_regex(op.template),
                 needs_token=scheme in op.schemes,
                 max_body_bytes=max_body_bytes.get((op.method, op.template),
                                                   default_max_body_bytes))
            for op in ops]


async def _answer(send: Send, status: int, detail: str,
                  headers: Iterable[tuple[str, str]] = ()) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
           (b"connection", b"close")]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    """Pure ASGI middleware (no body buffering): see the module docstring."""

    def __init__(self, app: ASGIApp, *, rules: Sequence[Rule], default_max_body_bytes: int,
                 ) -> None:
        self.app = app
        self.rules = rules
        self.default_max_body_bytes = default_max_body_bytes

    def _rule(self, method: str, path: str) -> Rule | None:
        return next((r for r in self.rules if r.matches(method, path)), None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rule = self._rule(scope["method"], scope["path"])
        headers = Headers(scope=scope)
        if rule is not None and rule.needs_token:
            token = bearer_token(headers.get("authorization"))
            if token is None or not well_formed(token):
                await _answer(send, 401, MISSING_TOKEN, [("WWW-Authenticate", "Bearer")])
                return
        limit = rule.max_body_bytes if rule is not None else self.default_max_body_bytes
        declared = headers.get("content-length")
        if declared is not None and _LENGTH.fullmatch(declared) is None:
            await _answer(send, 400, "Content-Length is not a byte count")
            return
        if declared is not None and int(declared) > limit:
            await _answer(send, 413, _too_large(limit))
            return
        await _Capped(self.app, limit).run(scope, receive, send)


def _too_large(limit: int) -> str:
    return (f"request body is over this route's limit of {limit} bytes; send less (uploads: "
            "smaller chunks)")


class _Capped:
    """One request whose streamed body is counted: past the cap the client gets 413 and
    the app sees a disconnect (and whatever it then sends is dropped)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.received = 0
        self.started = False
        self.refused = False

    async def run(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def capped_receive() -> Message:
            if self.refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                self.received += len(message.get("body", b""))
                if self.received > self.limit:
                    self.refused = True
                    if not self.started:
                        await _answer(send, 413, _too_large(self.limit))
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if self.refused:
                return
            self.started = True
            await send(message)

        try:
            await self.app(scope, capped_receive, guarded_send)
        except Exception:
            if not self.refused:
                raise  # a refused request's app may fail on the disconnect: already answered
