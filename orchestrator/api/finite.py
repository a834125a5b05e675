"""Request bodies are parsed as strict JSON: ``NaN``, ``Infinity`` and ``-Infinity``,
which Python's parser accepts but JSON has not, are refused (400) for every route.

Why here and not in the schemas: free-form parts of a body (a run's ``parameters``, a
campaign document, live metadata samples) are checked by JSON Schema, whose ``minimum``
and ``maximum`` let NaN through (every comparison with NaN is false). A NaN duration
then failed as a 500, and a NaN stored in a JSON column cannot be read by PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute

from orchestrator.api.errors import COMMON


def _refuse(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON number; send a finite number", "", 0)


class FiniteJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(await self.body(), parse_constant=_refuse)
        return self._json


class FiniteJsonRoute(APIRoute):
    """A route whose JSON body is parsed by :class:`FiniteJsonRequest`; FastAPI turns
    the decode error into a request-validation error (400, see ``api/errors.py``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def finite(request: Request) -> Response:
            return await handler(FiniteJsonRequest(request.scope, request.receive))

        return finite


def api_router(prefix: str, tag: str) -> APIRouter:
    """A router of token-checked API routes: strict JSON bodies, and the error codes
    every such route may answer documented (``errors.COMMON``)."""
    return APIRouter(prefix=prefix, tags=[tag], responses=COMMON, route_class=FiniteJsonRoute)
