"""What runs beside a run's container: the node's packet capture and the measurement
server's. Each is a :class:`~node_agent.hooks.RunHook` of three steps: ``prestart``
right before the container starts (it waits for its capture to listen), ``exited``
right after it ends (and again, harmlessly, on every way out of the run), ``finish``
after the container is removed, to put files in the run directory and write the
sidecar's meta document. A sidecar never fails a run: what went wrong goes to its meta
document and logs/agent.txt.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from node_agent.config import CaptureConfig
from node_agent.hooks import RunHook
from node_agent.rundir import agent_note
from node_agent.server_capture import META_FILE as SERVER_CAPTURE_META
from node_agent.server_capture import ServerCapture, capture_limit_s
from node_agent.server_capture import disabled_document as server_capture_disabled
from node_agent.skew import emulated_skew_s, skew_capture
from node_agent.spec import RunSpec
from testbed_kit.capture import RunningCapture, capture_member, disabled_document

log = logging.getLogger(__name__)


class NodeCapture(RunHook):
    """tcpdump of the run's interface on the node (:mod:`testbed_kit.capture`),
    into results/capture/<iface>.pcap with meta/capture.json. ``capture`` None: capture
    is off, and the meta document says so."""

    def __init__(self, run_id: str, interface: str, capture: RunningCapture | None) -> None:
        self.run_id = run_id
        self.interface = interface
        self.capture = capture

    @classmethod
    def for_run(cls, spec: RunSpec, run_dir: Path, *, config: CaptureConfig | None,
                netns_pid: Callable[[], int] | None) -> NodeCapture:
        """``netns_pid``: when the agent is not in the node's network namespace, the pid
        of a process that is (tcpdump is then run under nsenter)."""
        if config is None or not config.enabled:
            return cls(spec.run_id, spec.interface, None)
        pid: int | None = None
        if netns_pid is not None:
            try:
                pid = netns_pid()
            except Exception as e:  # a capture problem must not fail the run
                log.warning("run %s: cannot find the node's netns for capture: %s",
                            spec.run_id, e)
        # Written outside results/ while the run lasts (the container's /results is
        # copied over results/ afterwards), moved into results/capture/ at the end.
        return cls(spec.run_id, spec.interface, RunningCapture(
            spec.interface, run_dir / "capture" / Path(capture_member(spec.interface)).name,
            snaplen=config.snaplen, max_bytes=config.max_bytes, netns_pid=pid,
        ))

    def prestart(self) -> None:
        if self.capture is not None and not self.capture.start():
            log.warning("run %s: no packet capture: %s", self.run_id, self.capture.error)

    def exited(self) -> None:
        if self.capture is not None:
            self.capture.stop()

    def finish(self, run_dir: Path) -> None:
        """Stop tcpdump if still running, move its file to results/capture/<iface>.pcap
        and write meta/capture.json."""
        meta = run_dir / "meta"
        meta.mkdir(parents=True, exist_ok=True)
        capture = self.capture
        if capture is None:
            doc = disabled_document(self.interface)
        else:
            doc = dict(capture.stop())
            member = capture_member(self.interface)
            if capture.path.exists():
                target = run_dir / member
                if target.exists():  # the experiment wrote a file of that name itself
                    member = member.removesuffix(".pcap") + ".agent.pcap"
                    target = run_dir / member
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    capture.path.replace(target)
                    doc["file"] = member
                    _emulate_skew(target, doc)
                    with contextlib.suppress(OSError):
                        capture.path.parent.rmdir()
                except OSError as e:
                    doc["error"] = f"cannot move the capture into results/: {e}"
            if doc.get("error"):
                log.warning("run %s: capture: %s", self.run_id, doc["error"])
                agent_note(run_dir, f"packet capture: {doc['error']}")
        (meta / "capture.json").write_text(json.dumps(doc, indent=2))


def _emulate_skew(pcap: Path, doc: dict[str, Any]) -> None:
    """On the fault matrix's emulated wrong clock (node_agent.skew), stamp the node's
    capture on it too, as a skewed kernel would have."""
    skew = emulated_skew_s(os.environ)
    if skew is None:
        return
    try:
        skew_capture(pcap, skew)
        doc["emulated_clock_skew_s"] = skew
    except (OSError, ValueError) as e:
        doc["error"] = f"cannot move the capture to the emulated clock: {e}"


class ServerSideCapture(RunHook):
    """The measurement server's capture of the run (:mod:`node_agent.server_capture`),
    fetched into server/capture/<iface>.pcap with meta/server-capture.json. ``server``
    None: there is none, and ``off_because`` says why."""

    def __init__(self, run_id: str, interface: str, server: ServerCapture | None, *,
                 off_because: str = "") -> None:
        self.run_id = run_id
        self.interface = interface
        self.server = server
        self.off_because = off_because

    @classmethod
    def for_run(cls, spec: RunSpec, *, config: CaptureConfig | None, now: datetime,
                transport: httpx.BaseTransport | None = None) -> ServerSideCapture:
        """``now``: when the run starts (the server's capture ends by itself a margin
        past the deadline); ``transport``: an httpx transport for the service (tests)."""
        if config is None or not config.enabled:
            return cls(spec.run_id, spec.interface, None,
                       off_because="packet capture is off (capture.enabled)")
        if not spec.server_capture_url:
            return cls(spec.run_id, spec.interface, None,
                       off_because=f"no server_capture_url for interface {spec.interface}")
        return cls(spec.run_id, spec.interface, ServerCapture(
            spec.server_capture_url, interface=spec.interface,
            address=spec.interface_address, snaplen=config.snaplen,
            max_bytes=config.max_bytes, max_s=capture_limit_s(spec.deadline, now),
            label=spec.run_id, transport=transport,
        ))

    def prestart(self) -> None:
        if self.server is None:
            return
        try:
            started = self.server.start()
        except Exception as e:  # the server's capture must never fail the run
            self.server.error = f"{type(e).__name__}: {e}"
            started = False
        if not started:
            log.warning("run %s: no server-side capture: %s", self.run_id, self.server.error)

    def exited(self) -> None:
        if self.server is None:
            return
        try:
            self.server.stop()
        except Exception as e:  # recorded; fetch() reports it
            self.server.error = self.server.error or f"{type(e).__name__}: {e}"

    def finish(self, run_dir: Path) -> None:
        """Stop the server's capture if still running, fetch it into
        server/capture/<iface>.pcap and write meta/server-capture.json."""
        if self.server is None:
            doc = server_capture_disabled(self.interface, self.off_because)
        else:
            try:
                doc = self.server.fetch(run_dir)
            except Exception as e:  # the server's capture must never fail the run
                doc = {**server_capture_disabled(self.interface, "failed"), "enabled": True,
                       "error": f"{type(e).__name__}: {e}"}
            if doc.get("error"):
                log.warning("run %s: server capture: %s", self.run_id, doc["error"])
                agent_note(run_dir, f"server packet capture: {doc['error']}")
        meta = run_dir / SERVER_CAPTURE_META
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(json.dumps(doc, indent=2))
