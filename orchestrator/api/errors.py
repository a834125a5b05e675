"""The one place where the error vocabulary becomes HTTP status codes, and the one error
shape the API sends: ``{"detail": "<what went wrong and what to do>"}`` (a conflict may
add fields, e.g. an upload's ``offset``). Request-validation errors get that shape too,
with every problem named in ``detail``; the OpenAPI document says so for each route
(:func:`responses`), so what is documented is what is sent."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from orchestrator.archive.store import StorageError
from orchestrator.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NoSpace,
    NotFound,
    NotInstalled,
    OverCapacity,
    TestbedError,
    TooLarge,
    Unauthorized,
    UploadFailed,
)
from orchestrator.timeseries.influx import TimeSeriesUnavailable

STATUS: dict[type[TestbedError], int] = {
    NotFound: 404,
    Unauthorized: 401,
    Forbidden: 403,
    Invalid: 422,
    Conflict: 409,
    TooLarge: 413,
    StorageError: 507,
    OverCapacity: 507,
    NoSpace: 507,
    TimeSeriesUnavailable: 503,
    NotInstalled: 501,
}

#: What each documented error status means, as the OpenAPI document says it.
MEANING: dict[int, str] = {
    400: "Malformed request: a body that is not JSON, or a bad Content-Length",
    401: "Missing, malformed, unknown, revoked or expired token",
    403: "The token is valid but may not do this (administrators only)",
    404: "No such resource (or none this caller may see)",
    409: "Clashes with stored state (e.g. a final run, a wrong upload offset)",
    413: "Request body over the route's limit, or an upload over the bundle limit",
    415: "The body is not JSON: send Content-Type: application/json",
    422: "Invalid request: every problem is named in detail",
    501: "This orchestrator was installed without what the route needs (the dataset "
         "extra)",
    503: "The time-series store is unavailable; retry later",
    507: "No room on the orchestrator's disk (the archive, or a dataset release and "
         "the reserve it keeps): an operator must free space",
}
#: Most problems named in one 422 (a huge invalid body must not make a huge answer).
MAX_PROBLEMS = 20


class ErrorBody(BaseModel):
    """Every error the API sends."""

    model_config = ConfigDict(extra="allow")
    #: What went wrong and what to do about it.
    detail: str


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a router or route: these error codes, with ErrorBody."""
    return {code: {"model": ErrorBody, "description": MEANING[code]} for code in codes}


#: What every token-checked API route may answer with (before the route's own errors).
COMMON = responses(400, 401, 413, 415, 422)


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "request"


def _message(error: dict[str, Any]) -> str:
    cause = (error.get("ctx") or {}).get("error")
    msg = str(error.get("msg", "invalid"))
    return f"{msg}: {cause}" if error.get("type") == "json_invalid" and cause else msg


def validation_detail(errors: list[dict[str, Any]]) -> str:
    """``body.name: String should match pattern ...; query.limit: ...``."""
    shown = [f"{_where(tuple(e.get('loc', ())))}: {_message(e)}" for e in errors[:MAX_PROBLEMS]]
    more = len(errors) - MAX_PROBLEMS
    return "; ".join(shown) + (f"; and {more} more" if more > 0 else "")


def install(app: FastAPI) -> None:
    @app.exception_handler(TestbedError)
    async def _handle(_request: Request, exc: TestbedError) -> JSONResponse:
        status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 500)
        body: dict[str, object] = {"detail": str(exc)}
        if isinstance(exc, Conflict):
            body.update(exc.details)
        if isinstance(exc, UploadFailed):
            body["fault"] = exc.fault.value
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse({"detail": "the body is not valid JSON: "
                                 + validation_detail(errors)}, status_code=400)
        return JSONResponse({"detail": validation_detail(errors)}, status_code=422)
