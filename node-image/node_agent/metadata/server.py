"""Live metadata for experiments: a small HTTP server in the node's namespace.

An experiment that shares the node's network namespace reaches it on the node's
loopback, ``http://127.0.0.1:<port>`` (given to it as ``$TESTBED_METADATA_URL``); a
confined one (:mod:`node_agent.runnet`) on its gateway's address, where the agent opens
one more listener for the run's time (:meth:`MetadataServer.listen_also`). ``GET
/modem`` (every interface), ``GET /modem/<interface>``, ``GET /gps``; JSON; 404 with
``{"error": ...}`` when there is no sample. Read-only: any other method is refused with
405 and ``Allow: GET`` before its body is read.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from node_agent.metadata.sampler import MetadataSampler


def _handler(sampler: MetadataSampler) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "testbed-metadata/1"

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            status, body = route(sampler, path)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def _refuse(self) -> None:
            data = json.dumps({"error": f"{self.command} is not allowed: the live "
                               "metadata is read-only (GET)"}).encode()
            self.send_response(405)
            self.send_header("Allow", "GET")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True

        do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _refuse

        def log_message(self, format: str, *args: Any) -> None:
            pass  # experiments may poll often; nothing worth a log line

    return Handler


def route(sampler: MetadataSampler, path: str) -> tuple[int, Any]:
    if path == "/modem":
        return 200, {name: s.to_json() for name, s in sorted(sampler.latest_modems().items())}
    if path.startswith("/modem/"):
        name = path[len("/modem/"):]
        sample = sampler.latest_modems().get(name)
        if sample is None:
            return 404, {"error": f"no modem sample for interface {name!r}"}
        return 200, sample.to_json()
    if path == "/gps":
        if sampler.gps is None:
            return 404, {"error": "no GPS source is configured on this node"}
        fix = sampler.latest_gps()
        if fix is None:
            return 404, {"error": "no GPS report yet"}
        return 200, fix.to_json()
    return 404, {"error": f"unknown path {path!r}; try /modem, /modem/<interface>, /gps"}


class MetadataServer:
    def __init__(self, sampler: MetadataSampler, *, host: str = "127.0.0.1",
                 port: int = 8765) -> None:
        self.sampler = sampler
        self.httpd = ThreadingHTTPServer((host, port), _handler(sampler))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    def listen_also(self, host: str) -> MetadataServer:
        """The same endpoint on ``host`` too (a confined run's gateway), started; its
        :meth:`close` stops it."""
        other = MetadataServer(self.sampler, host=host, port=self.port)
        other.start()
        return other

    def close(self) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever,
                                        name="metadata-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for a loop that never started
            self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
