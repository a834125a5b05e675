"""No large body is read for a request that is unauthenticated or over its route's cap:
the guard answers from the headers (Content-Length) or stops a streamed body at the cap.
Measured on a real orchestrator process (uvicorn), by its peak memory."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.live import Live, orchestrator

MB = 1024**2


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with orchestrator(tmp_path_factory.mktemp("limits")) as server:
        yield server


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident memory (VmHWM), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc status")


def raw_post(live: Live, path: str, *, body_bytes: int, headers: dict[str, str],
             chunked: bool = False) -> tuple[int, bytes]:
    """POSTs ``body_bytes`` of a JSON array through a raw socket, from a thread that
    keeps sending while the answer is read (the server may answer before the body is
    in, and close); returns the status and the body of the answer."""
    host, port = live.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    head = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {body_bytes}")
    piece = b"[" + b"1," * (MB // 2 - 1) + b"1]"  # 1 MiB of valid JSON, repeated

    def send() -> None:
        try:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
            sent = 0
            while sent < body_bytes:
                part = piece[: body_bytes - sent]
                sock.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                sent += len(part)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed: what these tests expect

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    answer = b""
    try:
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) == 0:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    finally:
        sock.close()
        sender.join(timeout=60)
    status = int(answer.split(b" ", 2)[1])
    return status, answer.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize("chunked", [False, True])
def test_50_mb_without_token_is_refused_before_it_is_read(live: Live, chunked: bool) -> None:
    before = peak_rss_kib(live.pid)
    status, body = raw_post(live, "/api/v1/campaigns", body_bytes=50 * MB, headers={},
                            chunked=chunked)
    assert status == 401
    assert "Authorization: Bearer" in json.loads(body)["detail"]
    grown_kib = peak_rss_kib(live.pid) - before
    assert grown_kib < 5 * 1024, f"server peak memory grew by {grown_kib} KiB"


@pytest.mark.parametrize("chunked", [False, True])
def test_oversized_authenticated_body_gets_413(live: Live, chunked: bool) -> None:
    before = peak_rss_kib(live.pid)
    status, body = raw_post(live, "/api/v1/campaigns", body_bytes=50 * MB,
                            headers=live.admin, chunked=chunked)
    assert status == 413
    assert "limit of 1048576 bytes" in json.loads(body)["detail"]
    grown_kib = peak_rss_kib(live.pid) - before
    assert grown_kib < 5 * 1024, f"server peak memory grew by {grown_kib} KiB"


def test_malformed_tokens_and_lengths_are_refused_not_500(live: Live) -> None:
    for auth in ("Bearer tøken", "Bearer a b", "Basic abc", "Bearer"):
        r = httpx.get(f"{live.url}/api/v1/me", headers={"Authorization": auth.encode("latin-1")},
                      timeout=30)
        assert r.status_code == 401, (auth, r.text)
    r = httpx.get(f"{live.url}/pages/fleet", params={"token": "tøken\u2028"}, timeout=30)
    assert r.status_code == 401
    r = httpx.get(f"{live.url}/pages/fleet", timeout=30, follow_redirects=False,
                  headers={"Cookie": "testbed_pages=t\u00f8ken".encode("latin-1")})
    assert r.status_code in (303, 401)  # refused: sent to the sign-in page
    token = live.add_node("se-01")
    r = httpx.patch(f"{live.url}/api/v1/agent/runs/r-1/bundle", content=b"x",
                    headers={"Authorization": f"Bearer {token}", "Upload-Offset": str(2**63)},
                    timeout=30)
    assert r.status_code == 422 and "Upload-Offset" in r.json()["detail"]


def test_upload_chunks_keep_their_own_larger_cap(live: Live) -> None:
    token = live.add_node("se-02")
    headers = {"Authorization": f"Bearer {token}", "Upload-Offset": "0"}
    r = httpx.patch(f"{live.url}/api/v1/agent/runs/r-1/bundle", content=b"x" * (2 * MB),
                    headers=headers, timeout=60)
    assert r.status_code == 404  # over the JSON cap, under the chunk cap: reaches the route
    r = httpx.patch(f"{live.url}/api/v1/agent/runs/r-1/bundle", content=b"x" * (17 * MB),
                    headers=headers, timeout=60)
    assert r.status_code == 413
