"""Hands ITGRecv's receiver logs back to the nodes that sent the flows (HTTP GET).

D-ITG's receiver-side log, the only record of what the server received every 100 ms,
is written on the server (ITGSend's ``-x NAME`` names it, in ITGRecv's working
directory); D-ITG's own remote logging would have the server connect to an ITGLog on
the node, which a node behind its operator's NAT cannot accept. So the node fetches
``GET /NAME`` here once its flow is over and decodes the log itself.

A log still being written (modified within ``--settle-s``) answers 503 with
Retry-After, so a node never decodes half a log; logs older than ``--ttl-s`` are
deleted, so the server's disk does not fill. Names are plain file names ending in
``.log``; nothing outside the directory is served. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,120}\.log$")


def prune(directory: Path, ttl_s: float, now: float | None = None) -> int:
    """Delete logs older than ``ttl_s``; returns how many."""
    now = time.time() if now is None else now
    removed = 0
    for path in directory.glob("*.log"):
        try:
            if now - path.stat().st_mtime > ttl_s:
                path.unlink()
                removed += 1
        except OSError:
            continue  # gone meanwhile, or not ours to delete
    return removed


def make_handler(directory: Path, settle_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.lstrip("/")
            if not NAME.match(name) or name.startswith("."):
                self.send_error(404, "not a D-ITG log name")
                return
            path = directory / name
            try:
                age = time.time() - path.stat().st_mtime
                data = path.read_bytes() if age >= settle_s else None
            except OSError:
                self.send_error(404, "no such log")
                return
            if data is None:
                self.send_response(503, "log still being written")
                self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            sys.stderr.write(f"ditg-logs: {self.address_string()} {format % args}\n")

    return Handler


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="ITGRecv's working directory")
    ap.add_argument("--listen", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=9009)
    ap.add_argument("--ttl-s", type=float, default=3600.0, help="delete logs this old")
    ap.add_argument("--settle-s", type=float, default=1.0,
                    help="serve a log only once unmodified this long")
    a = ap.parse_args(argv)
    server = ThreadingHTTPServer((a.listen, a.port), make_handler(a.dir, a.settle_s))

    def pruner() -> None:
        while True:
            prune(a.dir, a.ttl_s)
            time.sleep(60)

    threading.Thread(target=pruner, daemon=True).start()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
