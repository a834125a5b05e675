"""HTTP client of the orchestrator's agent API (testbed_common.wire over JSON).

Every call has a timeout and a couple of quick retries for transient failures
(connection errors, timeouts, 5xx); longer outages surface as
:class:`OrchestratorUnreachable` and the agent's loops pace themselves with a backoff.
HTTP status codes are mapped to the agent's own errors here and nowhere else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from node_agent import __version__
from node_agent.errors import (
    Corrupted,
    NotFound,
    OffsetMismatch,
    OrchestratorUnreachable,
    ProtocolError,
    Rejected,
    RunFinal,
    Unauthorized,
)
from testbed_common import wire

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

#: Pauses before the quick retries of one call, seconds.
QUICK_RETRIES_S = (0.5, 1.5)


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    if isinstance(body, dict) and "detail" in body:
        return str(body["detail"])[:1000]
    return str(body)[:500]


def _corrupted(response: httpx.Response) -> bool:
    """A 422 that says the bytes were damaged in transit (resend), not refused."""
    if response.status_code != 422:
        return False
    try:
        fault = response.json().get("fault")
    except (ValueError, AttributeError):
        return False
    return bool(fault == wire.UploadFault.CORRUPTED)


class OrchestratorClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        quick_retries_s: tuple[float, ...] = QUICK_RETRIES_S,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + wire.AGENT_PREFIX,
            headers={
                "Authorization": f"Bearer {token}",
                "User-Agent": f"testbed-agent/{__version__}",
            },
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            transport=transport,
        )
        self._sleep = sleep
        self._retries = quick_retries_s

    def close(self) -> None:
        self._http.close()

    # -- plumbing ------------------------------------------------------------------------

    def _request(self, method: str, path: str, *, quick_retries: bool = True,
                 **kwargs: Any) -> httpx.Response:
        last = ""
        retries = self._retries if quick_retries else ()
        for attempt in range(len(retries) + 1):
            if attempt:
                self._sleep(retries[attempt - 1])
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
                continue
            if response.status_code >= 500:
                last = f"HTTP {response.status_code}: {_detail(response)}"
                continue
            if response.status_code in (401, 403):
                raise Unauthorized(
                    f"orchestrator refused the node token ({response.status_code}: "
                    f"{_detail(response)}); check TESTBED_NODE_TOKEN"
                )
            return response
        raise OrchestratorUnreachable(f"{method} {path}: {last}")

    @staticmethod
    def _parse(model: type[M], response: httpx.Response) -> M:
        try:
            return model.model_validate_json(response.content)
        except ValidationError as e:
            raise ProtocolError(
                f"{response.request.method} {response.request.url.path}: unexpected reply "
                f"({response.status_code}): {e}"
            ) from e

    @staticmethod
    def _unexpected(response: httpx.Response) -> Rejected | Corrupted:
        if _corrupted(response):
            return Corrupted(f"{response.request.url.path}: {_detail(response)}")
        return Rejected(
            f"{response.request.method} {response.request.url.path}: "
            f"HTTP {response.status_code}: {_detail(response)}",
            response.status_code,
        )

    # -- API -----------------------------------------------------------------------------

    def register(self, body: wire.Registration) -> wire.RegistrationReply:
        """One attempt: the agent paces registrations itself (it tries often while the
        orchestrator it started beside is not answering yet)."""
        r = self._request("POST", "/register", quick_retries=False,
                          json=body.model_dump(mode="json"))
        if r.status_code != 200:
            raise self._unexpected(r)
        return self._parse(wire.RegistrationReply, r)

    def heartbeat(self, body: wire.Heartbeat) -> wire.HeartbeatReply:
        r = self._request("POST", "/heartbeat", json=body.model_dump(mode="json"))
        if r.status_code != 200:
            raise self._unexpected(r)
        return self._parse(wire.HeartbeatReply, r)

    def report_state(self, run_id: str, body: wire.StateReport) -> None:
        # exclude_none: an orchestrator older than ``measured_bytes`` refuses unknown keys.
        r = self._request("POST", f"/runs/{run_id}/state",
                          json=body.model_dump(mode="json", exclude_none=True))
        if r.status_code in (200, 204):
            return
        if r.status_code == 409:
            raise RunFinal(f"run {run_id} is already final on the orchestrator: {_detail(r)}")
        if r.status_code == 404:
            raise NotFound(f"run {run_id} is unknown to the orchestrator: {_detail(r)}")
        raise self._unexpected(r)

    def create_upload(self, run_id: str, body: wire.UploadCreate) -> wire.UploadStatus:
        r = self._request("POST", f"/runs/{run_id}/bundle", json=body.model_dump(mode="json"))
        if r.status_code in (200, 201):
            return self._parse(wire.UploadStatus, r)
        if r.status_code == 404:
            raise NotFound(f"run {run_id} is unknown to the orchestrator: {_detail(r)}")
        raise self._unexpected(r)

    def append_chunk(self, run_id: str, offset: int, data: bytes) -> wire.UploadStatus:
        r = self._request(
            "PATCH",
            f"/runs/{run_id}/bundle",
            content=data,
            headers={
                wire.UPLOAD_OFFSET_HEADER: str(offset),
                "Content-Type": "application/offset+octet-stream",
            },
        )
        if r.status_code == 200:
            return self._parse(wire.UploadStatus, r)
        if r.status_code == 409:
            try:
                server_offset = int(r.json()["offset"])
            except (ValueError, KeyError, TypeError) as e:
                raise ProtocolError(f"409 on upload of {run_id} without an offset") from e
            raise OffsetMismatch(
                f"run {run_id}: orchestrator holds {server_offset} bytes, not {offset}",
                server_offset,
            )
        if r.status_code == 404:
            raise NotFound(f"no upload for run {run_id} on the orchestrator: {_detail(r)}")
        raise self._unexpected(r)

    def upload_status(self, run_id: str) -> wire.UploadStatus | None:
        r = self._request("GET", f"/runs/{run_id}/bundle")
        if r.status_code == 404:
            return None
        if r.status_code != 200:
            raise self._unexpected(r)
        return self._parse(wire.UploadStatus, r)
