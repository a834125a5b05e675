"""Captures the measurement server's side of a run's traffic for the node agent (HTTP).

A run's bundle carries both ends of its traffic: the node's tcpdump of its interface,
and this one, taken where the server receives and sends the run's packets. What the
server sees is what crossed the operator's network, so the two together tell the
network's part (delay, loss, reordering, policing) from the node's own.

The node agent, over a path that is not the run's SIM (the fleet's control network:
fetching a capture through the SIM would spend its data quota and cross the emulated
link it is measuring), asks:

    POST   /captures            {"address": A, "snaplen": 96, "max_bytes": N,
                                 "max_s": S, "label": "run id"}
                                -> 201 status: tcpdump listens, on the server
                                   interface that routes to A, for ``host A``
    POST   /captures/ID/stop    -> 200 status with tcpdump's counts, size and SHA-256
    GET    /captures/ID/pcap    -> the file, byte for byte (409 while still running)
    GET    /captures/ID         -> status
    DELETE /captures/ID         -> 204, file deleted
    GET    /healthz             -> 200 {"running": n, "kept": n}

Bounded, so that an agent that vanishes (or misbehaves) cannot fill the server: at most
``--max-captures`` at once (503 with Retry-After), each at most ``--max-bytes`` and
``--max-s`` (larger requests are lowered; the reply says what applies), all of them at
most ``--max-total-bytes`` of disk and never below ``--min-free-bytes`` free (507). A
capture still running at its ``max_s`` is stopped by the server; a stopped one not
deleted is deleted ``--keep-s`` later; files of an earlier life are deleted at start.
A capture's id is random: only the agent that started it can fetch it. Bad input
gets a 4xx whose message says what to send instead.

tcpdump is driven by the capture module the node agent uses too
(:mod:`testbed_kit.capture`, of the experiment kit, which the server image copies
beside this file; on PYTHONPATH from a checkout): one command line (-U,
--immediate-mode, snap length, size cap) and one reading of its counts for both sides.
Standard library only otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import ipaddress
import json
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from testbed_kit.capture import RunningCapture

FORMAT = "testbed.server-capture"
VERSION = 1
#: Longest request body accepted, bytes (a start request is a few dozen).
MAX_BODY = 4096
#: How often running captures are checked against their time cap, seconds.
TICK_S = 0.5
ID = re.compile(r"^[0-9a-f]{32}$")
LABEL = re.compile(r"^[\x20-\x7e]{0,120}$")
_ROUTE = re.compile(r"^/captures/([^/]+)(/stop|/pcap)?$")


# -- pure decisions ------------------------------------------------------------------


class Refused(Exception):
    """A request the service will not carry out: HTTP status and what to do instead."""

    def __init__(self, status: int, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Limits:
    max_captures: int = 16
    max_bytes: int = 200_000_000
    max_s: float = 7200.0
    max_total_bytes: int = 2_000_000_000
    min_free_bytes: int = 500_000_000
    keep_s: float = 600.0
    default_snaplen: int = 96


@dataclass(frozen=True)
class StartRequest:
    address: str
    snaplen: int
    max_bytes: int
    max_s: float
    label: str


def _number(body: dict[str, Any], key: str, default: float, *, integer: bool) -> float:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or (
            integer and not isinstance(value, int)):
        kind = "an integer" if integer else "a number"
        raise Refused(400, f"{key} must be {kind}, not {value!r}")
    if value <= 0:
        raise Refused(400, f"{key} must be positive, not {value!r}")
    return value


def parse_start(raw: bytes, limits: Limits) -> StartRequest:
    """A start request from its JSON body, with the server's caps applied (pure).

    Asking more than a cap is not an error: the capture gets the cap, and the reply
    says so (a long run keeps its first ``max_s`` on the server side)."""
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as e:
        raise Refused(400, f"the body must be a JSON object: {e}") from None
    if not isinstance(body, dict):
        raise Refused(400, "the body must be a JSON object such as "
                           '{"address": "172.30.1.21", "snaplen": 96}')
    unknown = sorted(set(body) - {"address", "snaplen", "max_bytes", "max_s", "label"})
    if unknown:
        raise Refused(400, f"unknown fields {unknown}: send address, and optionally "
                           "snaplen, max_bytes, max_s, label")
    address = body.get("address")
    if not isinstance(address, str):
        raise Refused(400, "address is required: the node's address on the run's "
                           "interface, as this server sees it (e.g. 172.30.1.21)")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise Refused(400, f"address {address!r} is not an IPv4 or IPv6 address; send "
                           "the node's address on the run's interface (e.g. 172.30.1.21)"
                      ) from None
    if ip.is_loopback or ip.is_unspecified or ip.is_multicast:
        raise Refused(400, f"address {address} is not a node's: a loopback, unspecified "
                           "or multicast address names no node")
    snaplen = int(_number(body, "snaplen", limits.default_snaplen, integer=True))
    if snaplen > 262144:
        raise Refused(400, f"snaplen {snaplen} is over tcpdump's 262144")
    label = body.get("label", "")
    if not isinstance(label, str) or not LABEL.match(label):
        raise Refused(400, "label must be printable ASCII, at most 120 characters "
                           "(the run's id)")
    max_bytes = int(_number(body, "max_bytes", limits.max_bytes, integer=True))
    max_s = float(_number(body, "max_s", limits.max_s, integer=False))
    return StartRequest(address=str(ip), snaplen=snaplen,
                        max_bytes=min(max_bytes, limits.max_bytes),
                        max_s=min(max_s, limits.max_s), label=label)


def route_device(ip_json: str, address: str) -> str:
    """The interface this server sends ``address``'s packets out of, from ``ip -j route
    get ADDRESS`` (pure): where the run's packets pass, both ways."""
    try:
        routes = json.loads(ip_json)
        route = routes[0]
        dev = route["dev"]
    except (ValueError, LookupError, TypeError):
        raise Refused(500, f"cannot read the route to {address}: {ip_json[:200]!r}") from None
    if route.get("type", "unicast") != "unicast" or dev == "lo":
        raise Refused(400, f"address {address} is this server's own ({route.get('type')}): "
                           "send the node's address, as the server sees the run's packets")
    if not isinstance(dev, str) or not dev:
        raise Refused(500, f"the route to {address} names no interface: {ip_json[:200]!r}")
    return dev


def admission(*, running: int, committed_bytes: int, free_bytes: int, want_bytes: int,
              limits: Limits) -> Refused | None:
    """Whether one more capture of ``want_bytes`` may start (pure): None, or why not.

    ``committed_bytes``: what the captures held may still take (a running one its cap,
    a stopped one its file), so the disk bound holds whatever they capture."""
    if running >= limits.max_captures:
        return Refused(503, f"{running} captures are running, the server's limit "
                            f"(--max-captures {limits.max_captures}); retry shortly",
                       retry_after_s=5)
    if committed_bytes + want_bytes > limits.max_total_bytes:
        return Refused(507, f"captures hold {committed_bytes} of the server's "
                            f"{limits.max_total_bytes} bytes (--max-total-bytes) and this "
                            f"one may take {want_bytes}: ask for a smaller max_bytes, or "
                            "fetch and DELETE finished captures")
    if free_bytes - want_bytes < limits.min_free_bytes:
        return Refused(507, f"the server's capture disk has {free_bytes} bytes free and "
                            f"keeps {limits.min_free_bytes} (--min-free-bytes): ask for a "
                            "smaller max_bytes, or free space on the server")
    return None


@dataclass(frozen=True)
class Chores:
    stop: tuple[str, ...]
    delete: tuple[str, ...]


@dataclass(frozen=True)
class Age:
    """What housekeeping needs to know of one capture (monotonic seconds)."""

    id: str
    started: float
    max_s: float
    stopped: float | None


def chores(ages: list[Age], now: float, keep_s: float) -> Chores:
    """Captures to stop (past their time cap: the agent is gone or late) and to delete
    (stopped more than ``keep_s`` ago and never deleted) (pure)."""
    return Chores(
        stop=tuple(a.id for a in ages if a.stopped is None and now - a.started >= a.max_s),
        delete=tuple(a.id for a in ages if a.stopped is not None and now - a.stopped >= keep_s),
    )


# -- the captures held ---------------------------------------------------------------


def sha256_file(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


class Capture:
    """One capture: its tcpdump, and its status once stopped."""

    def __init__(self, cid: str, req: StartRequest, device: str, path: Path) -> None:
        self.id = cid
        self.req = req
        self.device = device
        self.path = path
        self.started = time.monotonic()
        self.stopped: float | None = None
        self.stopped_by: str | None = None
        self.sha256: str | None = None
        self.tcpdump = RunningCapture(device, path, snaplen=req.snaplen,
                                      max_bytes=req.max_bytes,
                                      bpf_filter=("host", req.address))
        self._lock = threading.Lock()

    def stop(self, by: str) -> None:
        """End tcpdump (SIGTERM, then SIGKILL) and checksum its file; once."""
        with self._lock:
            if self.stopped is not None:
                return
            self.tcpdump.stop()
            self.sha256 = sha256_file(self.path)
            self.stopped_by = by
            self.stopped = time.monotonic()

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def status(self) -> dict[str, Any]:
        running = self.stopped is None
        doc: dict[str, Any] = {} if running else dict(self.tcpdump.stop())
        doc.update({
            "format": FORMAT,
            "version": VERSION,
            "id": self.id,
            "label": self.req.label,
            "address": self.req.address,
            "interface": self.device,
            "filter": f"host {self.req.address}",
            "snaplen": self.req.snaplen,
            "max_bytes": self.req.max_bytes,
            "max_s": self.req.max_s,
            "running": running,
            "bytes": self.size(),
            "sha256": self.sha256,
            "command": self.tcpdump.command,
            "started_at": self.tcpdump.started_at,
        })
        doc.pop("file", None)
        doc.pop("enabled", None)
        if not running:
            # ``stopped_by`` is how tcpdump ended (sigterm, sigkill, max_bytes, exited);
            # ``ended_by`` who ended the capture: the agent's "request", the server's
            # time cap "max_s", or a "deleted" capture.
            doc["ended_by"] = self.stopped_by
            doc["time_capped"] = self.stopped_by == "max_s"
        return doc


class Captures:
    """Every capture the service holds, under one lock; bounded by ``limits``."""

    def __init__(self, directory: Path, limits: Limits) -> None:
        self.dir = directory
        self.limits = limits
        self._held: dict[str, Capture] = {}
        self._lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.pcap"):  # an earlier life's: nobody can fetch them
            with contextlib.suppress(OSError):
                stale.unlink()

    def start(self, req: StartRequest) -> Capture:
        device = route_device(_ip_route_get(req.address), req.address)
        cid = secrets.token_hex(16)
        capture = Capture(cid, req, device, self.dir / f"{cid}.pcap")
        with self._lock:
            refusal = admission(
                running=sum(1 for c in self._held.values() if c.stopped is None),
                committed_bytes=sum(c.req.max_bytes if c.stopped is None else c.size()
                                    for c in self._held.values()),
                free_bytes=shutil.disk_usage(self.dir).free,
                want_bytes=req.max_bytes, limits=self.limits)
            if refusal is not None:
                raise refusal
            self._held[cid] = capture  # counted from now on, while tcpdump starts
        if not capture.tcpdump.start():
            self.delete(cid)
            raise Refused(500, f"tcpdump on the server did not start: {capture.tcpdump.error}")
        _say(f"capture {cid} of host {req.address} on {device} for {req.label or '-'} "
             f"(snaplen {req.snaplen}, at most {req.max_bytes} B, {req.max_s:g} s)")
        return capture

    def get(self, cid: str) -> Capture:
        with self._lock:
            capture = self._held.get(cid) if ID.match(cid) else None
        if capture is None:
            raise Refused(404, f"no capture {cid!r} here: it was never started, was "
                               f"deleted, or was kept longer than --keep-s "
                               f"({self.limits.keep_s:g} s) after it stopped; start one "
                               "with POST /captures")
        return capture

    def delete(self, cid: str) -> None:
        with self._lock:
            capture = self._held.pop(cid, None)
        if capture is not None:
            capture.stop("deleted")
            with contextlib.suppress(OSError):
                capture.path.unlink()

    def counts(self) -> dict[str, int]:
        with self._lock:
            running = sum(1 for c in self._held.values() if c.stopped is None)
            return {"running": running, "kept": len(self._held) - running}

    def tick(self) -> None:
        """Stop captures past their time cap, delete the long stopped ones."""
        with self._lock:
            ages = [Age(c.id, c.started, c.req.max_s, c.stopped) for c in self._held.values()]
            held = dict(self._held)
        todo = chores(ages, time.monotonic(), self.limits.keep_s)
        for cid in todo.stop:
            _say(f"capture {cid} reached its time cap ({held[cid].req.max_s:g} s): stopped")
            held[cid].stop("max_s")
        for cid in todo.delete:
            _say(f"capture {cid} not deleted {self.limits.keep_s:g} s after it stopped: "
                 "deleted")
            self.delete(cid)

    def close(self) -> None:
        for cid in list(self._held):
            self.delete(cid)


def _ip_route_get(address: str) -> str:
    try:
        proc = subprocess.run(["ip", "-j", "route", "get", address], capture_output=True,
                              text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Refused(500, f"cannot ask the server's routing table (ip route get): {e}"
                      ) from None
    if proc.returncode != 0:
        raise Refused(422, f"this server has no route to {address} "
                           f"({proc.stderr.strip() or 'ip route get failed'}): send the "
                           "node's address as the server sees it") from None
    return proc.stdout


def _say(message: str) -> None:
    sys.stderr.write(f"captures: {message}\n")


# -- HTTP ----------------------------------------------------------------------------


def make_handler(captures: Captures) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _json(self, status: int, doc: dict[str, Any]) -> None:
            data = json.dumps(doc, indent=1).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _refuse(self, e: Refused) -> None:
            data = json.dumps({"error": e.message}).encode()
            self.send_response(e.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if e.retry_after_s is not None:
                self.send_header("Retry-After", str(e.retry_after_s))
            self.end_headers()
            self.wfile.write(data)

        def _route(self) -> tuple[str | None, str | None]:
            m = _ROUTE.match(self.path)
            return (m.group(1), m.group(2)) if m else (None, None)

        def _body(self) -> bytes:
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                raise Refused(400, "Content-Length is not a number") from None
            if length > MAX_BODY:
                raise Refused(413, f"a start request is at most {MAX_BODY} bytes")
            return self.rfile.read(length) if length > 0 else b""

        def do_POST(self) -> None:
            try:
                body = self._body()
                cid, action = self._route()
                if self.path == "/captures":
                    req = parse_start(body, captures.limits)
                    self._json(201, captures.start(req).status())
                elif cid is not None and action == "/stop":
                    capture = captures.get(cid)
                    capture.stop("request")
                    self._json(200, capture.status())
                else:
                    raise Refused(404, "POST /captures to start, POST /captures/ID/stop "
                                       "to stop")
            except Refused as e:
                self._refuse(e)

        def do_GET(self) -> None:
            try:
                cid, action = self._route()
                if self.path == "/healthz":
                    self._json(200, captures.counts())
                elif cid is not None and action is None:
                    self._json(200, captures.get(cid).status())
                elif cid is not None and action == "/pcap":
                    self._send_pcap(captures.get(cid))
                else:
                    raise Refused(404, "GET /captures/ID for a status, /captures/ID/pcap "
                                       "for the file")
            except Refused as e:
                self._refuse(e)

        def do_DELETE(self) -> None:
            try:
                cid, action = self._route()
                if cid is None or action is not None:
                    raise Refused(404, "DELETE /captures/ID")
                captures.delete(captures.get(cid).id)
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()
            except Refused as e:
                self._refuse(e)

        def _send_pcap(self, capture: Capture) -> None:
            if capture.stopped is None:
                raise Refused(409, f"capture {capture.id} is still running: POST "
                                   f"/captures/{capture.id}/stop first")
            try:
                f = capture.path.open("rb")
            except OSError as e:
                raise Refused(410, f"capture {capture.id} has no file any more: {e}"
                              ) from None
            with f:
                size = f.seek(0, 2)
                f.seek(0)
                self.send_response(200)
                self.send_header("Content-Type", "application/vnd.tcpdump.pcap")
                self.send_header("Content-Length", str(size))
                if capture.sha256:
                    self.send_header("X-Capture-SHA256", capture.sha256)
                self.end_headers()
                shutil.copyfileobj(f, self.wfile, 1 << 20)

        def log_message(self, format: str, *args: object) -> None:
            _say(f"{self.address_string()} {format % args}")

    return Handler


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    d = Limits()
    ap.add_argument("--dir", type=Path, required=True, help="where capture files are kept")
    ap.add_argument("--listen", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=9010)
    ap.add_argument("--max-captures", type=int, default=d.max_captures)
    ap.add_argument("--max-bytes", type=int, default=d.max_bytes,
                    help="largest capture file; larger requests are lowered to it")
    ap.add_argument("--max-s", type=float, default=d.max_s,
                    help="longest capture, seconds; stopped by the server then")
    ap.add_argument("--max-total-bytes", type=int, default=d.max_total_bytes)
    ap.add_argument("--min-free-bytes", type=int, default=d.min_free_bytes)
    ap.add_argument("--keep-s", type=float, default=d.keep_s,
                    help="delete a stopped capture not deleted by its agent this late")
    a = ap.parse_args(argv)
    limits = Limits(max_captures=a.max_captures, max_bytes=a.max_bytes, max_s=a.max_s,
                    max_total_bytes=a.max_total_bytes, min_free_bytes=a.min_free_bytes,
                    keep_s=a.keep_s)
    captures = Captures(a.dir, limits)
    server = ThreadingHTTPServer((a.listen, a.port), make_handler(captures))
    # SIGTERM (the server's entrypoint stopping) ends tcpdumps and deletes their files.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    def housekeeping() -> None:
        while True:
            time.sleep(TICK_S)
            try:
                captures.tick()
            except Exception as e:  # keep the caps enforced whatever one capture does
                _say(f"housekeeping: {type(e).__name__}: {e}")

    threading.Thread(target=housekeeping, daemon=True).start()
    _say(f"listening on {a.listen}:{a.port}, files in {a.dir}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        captures.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
