"""The measurement server's HTTP payload responder (port 9080): D bytes per connection.

For the goodput-sequence experiment (after Pentikousis et al., who timed back-to-back
HTTP downloads on 3G): ``GET /payload?bytes=D`` answers D bytes (downlink);
``POST /payload`` with a body of D bytes reads them all and answers a small JSON
``{"received": D}`` (uplink), so the client's clock stops only once the server holds
the last byte. Every response closes its connection: each transfer is a fresh TCP
connection, and its goodput counts the handshake, as the reference's did.

HTTP rather than a bare TCP sink/source: the reference measured HTTP transfers, the
request line carries the size and direction in a form any HTTP client (curl, a
browser) can replay by hand, and the status line says what went wrong instead of a
silent close. Standard library only, one thread per connection.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

PORT = 9080
#: Largest transfer served or accepted: the experiment's bound (16 MiB) with room.
MAX_BYTES = 64 * 1024**2
#: The payload is this block repeated: incompressible, and made once.
BLOCK = os.urandom(64 * 1024)
#: A client silent this long mid-request is dropped (a vanished node).
TIMEOUT_S = 60


def requested_size(target: str) -> int | str:
    """The ``bytes`` of ``/payload?bytes=D``, or why the request is refused."""
    url = urlsplit(target)
    if url.path != "/payload":
        return f"no such path {url.path!r}; ask for /payload?bytes=D"
    values = parse_qs(url.query).get("bytes", [])
    if len(values) != 1 or not values[0].isdigit():
        return "give the size once, as digits: /payload?bytes=D"
    size = int(values[0])
    if not 1 <= size <= MAX_BYTES:
        return f"bytes={size} is outside 1..{MAX_BYTES}"
    return size


class PayloadHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "testbed-payload/1"
    timeout = TIMEOUT_S

    def _refuse(self, status: int, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def do_GET(self) -> None:
        size = requested_size(self.path)
        if isinstance(size, str):
            return self._refuse(400, size)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.send_header("Connection", "close")
        self.end_headers()
        left = size
        while left:
            chunk = BLOCK[:min(left, len(BLOCK))]
            self.wfile.write(chunk)
            left -= len(chunk)
        self.close_connection = True
        return None

    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/payload":
            return self._refuse(404, f"no such path {self.path!r}; POST to /payload")
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or not 1 <= int(length) <= MAX_BYTES:
            return self._refuse(400, f"Content-Length {length!r} is not 1..{MAX_BYTES}")
        left = int(length)
        while left:
            chunk = self.rfile.read(min(left, len(BLOCK)))
            if not chunk:
                self.close_connection = True
                return None  # the client went away: nobody to answer
            left -= len(chunk)
        body = json.dumps({"received": int(length)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True
        return None

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per transfer would flood the server's log


def make_server(listen: str, port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((listen, port), PayloadHandler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--listen", default="0.0.0.0")
    p.add_argument("--port", type=int, default=PORT)
    args = p.parse_args(argv)
    with make_server(args.listen, args.port) as server:
        print(f"payload server on {args.listen}:{args.port}", file=sys.stderr)
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
