"""The measurement server's flow responder: N bytes per TCP connection, either way.

The short-flows experiment (experiments/short-flows) opens a fresh connection per flow
and sends one request line (:func:`testbed_kit.short_flows.request_line`):

- ``down N``: the server sends N bytes and closes (the server is the sender:
  downlink);
- ``up N``: the client sends N bytes and half-closes; the server reads them all,
  answers ``ok`` and closes (uplink).

Two options follow the size (cca-compare, experiments/cca-compare):

- ``cca=<name>``: the congestion control the server sends with (``TCP_CONGESTION`` on
  this connection; ignored when the server receives: the client then sets its own).
  One the kernel does not have, or will not let this process use, gets ``error:``;
- ``seconds=<s>``: a timed flow: the sender stops after that long or at the size,
  whichever is first; an uplink flow's ``ok`` then says how many bytes arrived.

One thread per connection, so a slow node never holds up another; a connection idle
for ``--idle-s`` is dropped, and at most ``--max-connections`` are served at once
(more are closed at accept), so a client that vanishes or misbehaves cannot pin the
server. A bad request line gets ``error: <why>`` and a close. The completion time is
not timed here: it comes from the captures (both ends are captured for every run).

Standard library and the experiment kit only (the server image copies the kit beside
this file; on PYTHONPATH from a checkout).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Sequence

from testbed_kit.short_flows import RESPONDER_PORT, parse_flow_request

log = logging.getLogger("flow-responder")

#: Bytes per send()/recv(): large enough for few system calls on a fast link.
CHUNK = 64 * 1024
#: The request line is short ("down 1073741824\n" is 16 bytes).
MAX_REQUEST = 64


def _read_line(conn: socket.socket) -> bytes:
    """The request line, read byte-wise up to its newline so no payload of an uplink
    flow is consumed with it."""
    line = bytearray()
    while len(line) < MAX_REQUEST:
        b = conn.recv(1)
        if not b:
            break
        line += b
        if b == b"\n":
            break
    return bytes(line)


def set_congestion_control(conn: socket.socket, cca: str) -> None:
    """Send with ``cca`` on this connection; OSError naming it when the kernel has no
    such module (ENOENT) or does not allow it here (EPERM: not in
    ``net.ipv4.tcp_allowed_congestion_control`` and no CAP_NET_ADMIN)."""
    try:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cca.encode())
    except OSError as e:
        raise OSError(e.errno, f"congestion control {cca!r} refused: {e.strerror}") from e


def serve_connection(conn: socket.socket, *, idle_s: float) -> tuple[str, int]:
    """Answer one flow's request on ``conn`` (then closed by the caller); returns the
    direction and bytes moved, for the log. Raises ValueError for a bad request (after
    telling the client) and OSError when the peer went away."""
    conn.settimeout(idle_s)
    line = _read_line(conn)
    try:
        request = parse_flow_request(line)
        if request.cca is not None and request.direction == "downlink":
            set_congestion_control(conn, request.cca)
    except (ValueError, OSError) as e:
        conn.sendall(f"error: {e}\n".encode())
        raise ValueError(str(e)) from e
    size = request.size
    deadline = None if request.seconds is None else time.monotonic() + request.seconds
    moved = 0
    if request.direction == "downlink":
        block = b"\0" * CHUNK
        while moved < size and (deadline is None or time.monotonic() < deadline):
            n = min(CHUNK, size - moved)
            conn.sendall(block[:n])
            moved += n
        conn.shutdown(socket.SHUT_WR)
        while conn.recv(CHUNK):  # the client's close: the last ACKs are its business
            pass
    else:
        while moved < size:
            got = conn.recv(min(CHUNK, size - moved))
            if not got:
                break
            moved += len(got)
        if moved == size and deadline is None:
            answer = b"ok\n"
        elif deadline is not None:  # timed: whatever the client sent before it stopped
            answer = f"ok {moved}\n".encode()
        else:
            answer = f"error: got {moved} of {size}\n".encode()
        conn.sendall(answer)
        conn.shutdown(socket.SHUT_WR)
    return request.direction, moved


class Responder:
    """The listening socket and its connection threads."""

    def __init__(self, *, host: str, port: int, idle_s: float, max_connections: int) -> None:
        self.sock = socket.create_server((host, port), reuse_port=False, backlog=64)
        self.idle_s = idle_s
        self.slots = threading.BoundedSemaphore(max_connections)
        self.closing = threading.Event()

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def _one(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        try:
            with conn:
                direction, moved = serve_connection(conn, idle_s=self.idle_s)
                log.debug("%s:%d %s %d bytes", *peer, direction, moved)
        except (OSError, ValueError) as e:
            log.info("%s:%d: %s", *peer, e)
        finally:
            self.slots.release()

    def serve_forever(self) -> None:
        """Accept until :meth:`close`; connections in progress go on in their threads."""
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                if self.closing.is_set():
                    return
                raise
            if not self.slots.acquire(blocking=False):
                log.warning("%s:%d refused: all connection slots busy", *peer)
                conn.close()
                continue
            threading.Thread(target=self._one, args=(conn, peer), daemon=True).start()

    def close(self) -> None:
        """Stop accepting. Why shutdown before close: closing the socket alone neither
        wakes an ``accept`` blocked in another thread on Linux nor keeps that thread
        from calling ``accept`` on a closed descriptor (EBADF) after its next
        connection; shutting it down wakes the call, and the event says the error that
        follows is the stop, not a fault."""
        self.closing.set()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--listen", default="0.0.0.0", help="address to listen on")
    ap.add_argument("--port", type=int, default=RESPONDER_PORT, help="TCP port")
    ap.add_argument("--idle-s", type=float, default=30.0,
                    help="drop a connection silent this long, s")
    ap.add_argument("--max-connections", type=int, default=64,
                    help="connections served at once; more are closed at accept")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="flow-responder: %(message)s")
    responder = Responder(host=args.listen, port=args.port, idle_s=args.idle_s,
                          max_connections=args.max_connections)
    log.info("listening on %s:%d", args.listen, responder.port)
    responder.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
