"""The flow responder's cca-compare options on real sockets (loopback): the server sets
the requested congestion control on the connection it sends on, refuses one the kernel
does not have with the reason, and a timed flow stops at its time."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import load_server_module, require

flow_responder = load_server_module("flow_responder")


def _available() -> set[str]:
    try:
        return set(Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
                   .read_text().split())
    except OSError:
        return set()


@pytest.fixture
def responder() -> Iterator[int]:
    r = flow_responder.Responder(host="127.0.0.1", port=0, idle_s=10, max_connections=4)
    serving = threading.Thread(target=r.serve_forever, daemon=True)
    serving.start()
    yield r.port
    r.close()
    serving.join(timeout=5)
    assert not serving.is_alive(), "the responder did not stop accepting on close()"


def _connect(port: int, line: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(line)
    return s


def test_the_congestion_control_is_set_on_the_connection() -> None:
    have = _available()
    require({"cubic", "bbr"} <= have, f"needs cubic and bbr in the kernel (has {have})")
    for cca in ("cubic", "bbr"):
        with socket.socket() as s:
            flow_responder.set_congestion_control(s, cca)
            got = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
            assert got.rstrip(b"\0").decode() == cca


def test_an_unknown_congestion_control_is_refused_with_the_reason(responder: int) -> None:
    with _connect(responder, b"down 1000 cca=nosuchcc\n") as s:
        answer = s.recv(200)
    assert answer.startswith(b"error: ") and b"nosuchcc" in answer, answer


def test_a_timed_downlink_stops_at_its_time(responder: int) -> None:
    """The client reads nothing for 1.5 s of a 1 s flow: the server has filled the
    buffers by then, and once read it sends no more than a chunk past its deadline."""
    with _connect(responder, b"down 1073741824 cca=cubic seconds=1\n") as s:
        time.sleep(1.5)
        began, moved = time.monotonic(), 0
        while chunk := s.recv(1 << 16):
            moved += len(chunk)
        drained = time.monotonic() - began
    assert 0 < moved < 64 * 1024**2 and drained < 2.0, (moved, drained)


def test_a_timed_uplink_answers_what_arrived(responder: int) -> None:
    with _connect(responder, b"up 1073741824 seconds=1\n") as s:
        sent = 0
        block = b"\0" * 65536
        end = time.monotonic() + 0.1
        while time.monotonic() < end and sent < 256 * 1024**2:
            s.sendall(block)
            sent += len(block)
        s.shutdown(socket.SHUT_WR)
        answer = s.recv(100)
    assert answer == f"ok {sent}\n".encode()
