"""A TCP relay between the agent's client and a real orchestrator that misbehaves once,
at a given byte of what the client sent: it drops the connection (a cut link) or flips
that byte (damage in transit that TCP's checksum missed), then relays faithfully."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum

from tests.integration.live import free_port


class Fault(Enum):
    CUT = "cut"
    FLIP = "flip"


class FaultyRelay:
    """Relays TCP to ``target``; at byte ``at`` from the client it applies ``fault``
    once. Counts every byte the client sent."""

    def __init__(self, target: int, *, at: int, fault: Fault) -> None:
        self.target = target
        self.at = at
        self.fault = fault
        self.sent = 0
        self.done = False
        self.port = free_port()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, upstream, True),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False),
                             daemon=True).start()

    def _tamper(self, data: bytes) -> bytes | None:
        """``data`` as relayed, or None to cut the connection."""
        with self._lock:
            start, self.sent = self.sent, self.sent + len(data)
            hit = not self.done and self.sent > self.at
            if hit:
                self.done = True
        if not hit:
            return data
        if self.fault is Fault.CUT:
            return None
        i = max(self.at - start, 0)
        return data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:]

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                relayed = self._tamper(data) if from_client else data
                if relayed is None:
                    for s in (src, dst):
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     b"\x01\x00\x00\x00\x00\x00\x00\x00")
                        s.close()
                    return
                dst.sendall(relayed)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

    def close(self) -> None:
        self._server.close()


@contextmanager
def relay(target: int, *, at: int, fault: Fault) -> Iterator[FaultyRelay]:
    r = FaultyRelay(target, at=at, fault=fault)
    try:
        yield r
    finally:
        r.close()
