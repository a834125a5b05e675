"""The measurement server's side of a run's packet capture, asked for over HTTP.

The server's capture service (server-image/capture_service.py) runs tcpdump for ``host
A`` (A: the run's interface address) on the server interface that routes to A. The
runner starts it right before the experiment container (beside the node's own
capture), stops it right after, fetches the file into the run directory as
``server/capture/<iface>.pcap`` and writes ``meta/server-capture.json``. The file sits
outside ``results/`` on purpose: the orchestrator's ingest turns every pcap under
results/ into flow points, and the server's view of the same flows would count them
twice. The bundle's manifest checksums it like every other file, and the raw archive
keeps it as sent.

The service's URL is per interface (``server_capture_url``) and must be reached over a
path that is not the run's SIM (the node's management or backhaul link; the fleet's
control network): a fetch through the SIM would spend its data quota and cross the
link being measured. Nothing about the server's capture ever fails a run: what went
wrong is written to meta/server-capture.json and logs/agent.txt.

Pure parts (request body, time cap, bundle member, documents) are separate from the
HTTP calls; the HTTP transport is injectable, so both are unit-tested without a server.
"""

from __future__ import annotations

import contextlib
import hashlib
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import httpx

from testbed_kit.capture import capture_member

FORMAT = "testbed.server-capture"
VERSION = 1
#: Where the server's capture goes in the run directory / bundle: outside results/.
SERVER_CAPTURE_DIR = "server/capture"
META_FILE = "meta/server-capture.json"
#: The server captures this long past the run's deadline at most, seconds: the agent
#: stops it right after the container ends, so this only bounds an agent that vanished.
STOP_MARGIN_S = 60.0
#: A start answers within a second (the server waits at most 5 s for tcpdump to
#: listen); it delays the experiment, so a silent service is given up on quickly.
START_TIMEOUT = httpx.Timeout(10.0, connect=3.0)
#: A stop takes up to 10 s (SIGTERM, then SIGKILL) and a checksum of the file.
STOP_TIMEOUT = httpx.Timeout(30.0, connect=3.0)
#: Seconds without a byte while fetching the file.
FETCH_TIMEOUT = httpx.Timeout(60.0, connect=3.0)


def server_capture_member(interface: str) -> str:
    """The bundle member the server's capture of ``interface``'s run is stored as."""
    return f"{SERVER_CAPTURE_DIR}/{PurePosixPath(capture_member(interface)).name}"


def capture_limit_s(deadline: datetime, now: datetime) -> float:
    """How long the server may capture (pure): to the run's deadline plus a margin, so
    a capture whose agent vanished ends on its own."""
    return max(1.0, (deadline - now).total_seconds()) + STOP_MARGIN_S


def start_body(*, address: str, snaplen: int, max_bytes: int, max_s: float,
               label: str) -> dict[str, Any]:
    """The service's start request (pure)."""
    return {"address": address, "snaplen": snaplen, "max_bytes": max_bytes,
            "max_s": round(max_s, 3), "label": label[:120]}


def disabled_document(interface: str, reason: str) -> dict[str, Any]:
    """meta/server-capture.json of a run without the server's capture, and why."""
    return {"format": FORMAT, "version": VERSION, "enabled": False,
            "interface": interface, "file": None, "reason": reason}


def _error_message(r: httpx.Response) -> str:
    try:
        body = r.json()
        message = body.get("error") if isinstance(body, dict) else None
    except ValueError:
        message = None
    return f"HTTP {r.status_code}: {message or r.text[:300] or r.reason_phrase}"


def _now() -> str:
    return datetime.now(UTC).isoformat()


class ServerCapture:
    """One run's capture on the measurement server: :meth:`start`, :meth:`stop`, then
    :meth:`fetch` into the run directory, which returns meta/server-capture.json."""

    def __init__(
        self,
        url: str,
        *,
        interface: str,
        address: str | None,
        snaplen: int,
        max_bytes: int,
        max_s: float,
        label: str,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.interface = interface
        self.address = address
        self.body = (start_body(address=address, snaplen=snaplen, max_bytes=max_bytes,
                                max_s=max_s, label=label) if address else None)
        self.id: str | None = None
        self.error: str | None = None
        self.started_at: str | None = None
        self.stopped_at: str | None = None
        #: The service's status document, from its start and then its stop reply.
        self.server: dict[str, Any] | None = None
        self._transport = transport

    def _client(self, timeout: httpx.Timeout) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout, transport=self._transport)

    def start(self) -> bool:
        """Ask the server to capture; False (and ``error`` set) when it does not."""
        self.started_at = _now()
        if self.body is None:
            self.error = (f"interface {self.interface} has no address: the server cannot "
                          "be told whose packets to capture")
            return False
        try:
            with self._client(START_TIMEOUT) as c:
                r = c.post("/captures", json=self.body)
        except httpx.HTTPError as e:
            self.error = f"cannot reach the server's capture service at {self.url}: {e}"
            return False
        if r.status_code != 201:
            self.error = f"the server's capture service refused: {_error_message(r)}"
            return False
        try:
            self.server = r.json()
            self.id = str(self.server["id"]) if isinstance(self.server, dict) else None
        except (ValueError, KeyError):
            self.id = None
        if not self.id:
            self.error = f"the server's capture service answered without an id: {r.text[:300]}"
            return False
        return True

    def stop(self) -> None:
        """Ask the server to stop (once; nothing to do when it never started)."""
        if self.id is None or self.stopped_at is not None:
            return
        self.stopped_at = _now()
        try:
            with self._client(STOP_TIMEOUT) as c:
                r = c.post(f"/captures/{self.id}/stop")
        except httpx.HTTPError as e:
            self.error = f"cannot stop the server's capture: {e}"
            return
        if r.status_code != 200:
            self.error = f"the server's capture service did not stop it: {_error_message(r)}"
            return
        with contextlib.suppress(ValueError):
            self.server = r.json()

    def fetch(self, run_dir: Path) -> dict[str, Any]:
        """Stop if not yet stopped, fetch the file into ``run_dir`` (checked against the
        server's size and SHA-256), delete it on the server; returns the meta document."""
        if self.id is None and self.error is None and self.started_at is None:
            self.error = "not started: the run ended before its container started"
        self.stop()
        member: str | None = None
        size: int | None = None
        digest: str | None = None
        if self.id is not None and self.error is None:
            target = run_dir / server_capture_member(self.interface)
            try:
                size, digest = self._download(target)
                member = server_capture_member(self.interface)
            except (httpx.HTTPError, OSError, _FetchError) as e:
                self.error = f"cannot fetch the server's capture: {e}"
                with contextlib.suppress(OSError):
                    target.unlink()
            else:
                self._delete()
        return {
            "format": FORMAT,
            "version": VERSION,
            "enabled": True,
            "url": self.url,
            "interface": self.interface,
            "address": self.address,
            "file": member,
            "bytes": size,
            "sha256": digest,
            "started_at": self.started_at,
            "stopped_at": self.stopped_at,
            "error": self.error,
            "server": self.server,
        }

    def _download(self, target: Path) -> tuple[int, str]:
        expected = self.server or {}
        target.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        size = 0
        with self._client(FETCH_TIMEOUT) as c, \
                c.stream("GET", f"/captures/{self.id}/pcap") as r:
            if r.status_code != 200:
                r.read()
                raise _FetchError(_error_message(r))
            with target.open("wb") as f:
                for block in r.iter_bytes(1 << 20):
                    f.write(block)
                    h.update(block)
                    size += len(block)
        digest = h.hexdigest()
        if expected.get("sha256") not in (None, digest) or expected.get("bytes") not in (
                None, size):
            raise _FetchError(f"got {size} bytes with SHA-256 {digest}, the server has "
                              f"{expected.get('bytes')} with {expected.get('sha256')}")
        return size, digest

    def _delete(self) -> None:
        """Free the server's disk; a failure only leaves the file to its expiry."""
        with contextlib.suppress(httpx.HTTPError), self._client(START_TIMEOUT) as c:
            c.delete(f"/captures/{self.id}")


class _FetchError(Exception):
    pass
