"""The one place where the error vocabulary becomes HTTP status codes."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from orchestrator.archive.store import StorageError
from orchestrator.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
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
    TimeSeriesUnavailable: 503,
}


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
