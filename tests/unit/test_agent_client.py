"""HTTP status codes -> the agent's errors (httpx MockTransport; no network)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import pytest

from node_agent.client import OrchestratorClient
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
from testbed_common.states import RunState

NOW = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
SHA = "0" * 64


def _client(handler: Callable[[httpx.Request], httpx.Response]) -> OrchestratorClient:
    return OrchestratorClient(
        "http://orchestrator:8080/", "node-token", transport=httpx.MockTransport(handler),
        sleep=lambda _s: None,
    )


def _status(offset: int, complete: bool = False) -> dict[str, object]:
    return {"run_id": "r-1", "size": 10, "sha256": SHA, "offset": offset, "complete": complete}


def test_register_sends_token_and_parses_reply() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={
            "node_id": "se-01", "heartbeat_interval_s": 5, "active_run_ids": ["r-9"]})

    reply = _client(handler).register(
        wire.Registration(agent_version="0.1.0", interfaces=[]))
    assert reply.active_run_ids == ["r-9"]
    assert seen[0].url.path == "/api/v1/agent/register"
    assert seen[0].headers["authorization"] == "Bearer node-token"


def test_401_is_unauthorized_without_retries() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(401, json={"detail": "unknown node token"})

    with pytest.raises(Unauthorized, match="unknown node token"):
        _client(handler).register(wire.Registration(agent_version="0", interfaces=[]))
    assert len(calls) == 1


def test_transport_errors_and_5xx_are_retried_then_unreachable() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) == 1:
            raise httpx.ConnectError("connection refused")
        return httpx.Response(503, text="starting")

    with pytest.raises(OrchestratorUnreachable, match="503"):
        _client(handler).heartbeat(wire.Heartbeat(sent_at=NOW, interfaces=[], disk_free_bytes=1))
    assert len(calls) == 3


@pytest.mark.parametrize("fault", ["timeout", "503"])
def test_retry_recovers(fault: str) -> None:
    """Two transient failures, then the orchestrator answers: the same report is sent
    three times, after the client's two quick pauses, and the call succeeds."""
    seen: list[httpx.Request] = []
    slept: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) < 3:
            if fault == "timeout":
                raise httpx.ReadTimeout("slow")
            return httpx.Response(503, json={"detail": "restarting"})
        return httpx.Response(204)

    client = OrchestratorClient(
        "http://orchestrator:8080/", "node-token", transport=httpx.MockTransport(handler),
        sleep=slept.append, quick_retries_s=(0.5, 1.5))
    # returns (raises nothing): the third try was accepted
    client.report_state("r-1", wire.StateReport(state=RunState.RUNNING, reason="started",
                                                at=NOW))
    assert len(seen) == 3 and slept == [0.5, 1.5]
    assert {r.url.path for r in seen} == {"/api/v1/agent/runs/r-1/state"}
    assert [json.loads(r.content)["state"] for r in seen] == ["running"] * 3


@pytest.mark.parametrize(
    ("status", "error"), [(409, RunFinal), (404, NotFound), (422, Rejected)]
)
def test_state_report_errors(status: int, error: type[Exception]) -> None:
    client = _client(lambda r: httpx.Response(status, json={"detail": "no"}))
    with pytest.raises(error):
        client.report_state("r-1", wire.StateReport(state=RunState.DONE, reason="x", at=NOW))


def test_chunk_offset_mismatch_carries_the_offset() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["upload-offset"] == "4"
        assert request.headers["content-type"] == "application/offset+octet-stream"
        assert request.content == b"abc"
        return httpx.Response(409, json={"detail": "offset mismatch", "offset": 7})

    with pytest.raises(OffsetMismatch) as info:
        _client(handler).append_chunk("r-1", 4, b"abc")
    assert info.value.offset == 7


def test_chunk_rejected_on_verification_failure() -> None:
    client = _client(lambda r: httpx.Response(422, json={"detail": "checksum mismatch"}))
    with pytest.raises(Rejected, match="checksum mismatch") as info:
        client.append_chunk("r-1", 0, b"abc")
    assert info.value.status == 422


def test_damage_in_transit_and_refusal_are_told_apart_by_the_fault_field() -> None:
    damaged = _client(lambda r: httpx.Response(
        422, json={"detail": "corrupted in transit; upload it again from offset 0",
                   "fault": "corrupted"}))
    with pytest.raises(Corrupted, match="from offset 0"):
        damaged.append_chunk("r-1", 0, b"abc")
    with pytest.raises(Corrupted):  # a part found full on re-declaration, then damaged
        damaged.create_upload("r-1", wire.UploadCreate(size=10, sha256=SHA))
    refused = _client(lambda r: httpx.Response(
        422, json={"detail": "path traversal", "fault": "refused"}))
    with pytest.raises(Rejected, match="path traversal"):
        refused.append_chunk("r-1", 0, b"abc")


def test_upload_status_404_is_none() -> None:
    assert _client(lambda r: httpx.Response(404, json={"detail": "x"})).upload_status("r") is None
    ok = _client(lambda r: httpx.Response(200, json=_status(3)))
    status = ok.upload_status("r-1")
    assert status is not None and status.offset == 3


def test_malformed_reply_is_a_protocol_error() -> None:
    client = _client(lambda r: httpx.Response(200, content=json.dumps({"nope": 1}).encode()))
    with pytest.raises(ProtocolError):
        client.create_upload("r-1", wire.UploadCreate(size=10, sha256=SHA))


def test_register_is_one_attempt_the_agent_paces_the_next() -> None:
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(502, text="bad gateway")

    with pytest.raises(OrchestratorUnreachable):
        _client(handler).register(wire.Registration(agent_version="0.1.0", interfaces=[]))
    assert len(calls) == 1
