"""Running ``testbed-flows`` (tools/flows), the compiled per-flow analysis of captures.

Why a separate program rather than an extension module: it ships like the other Rust
tools (built once in scripts/build-images.sh, copied into the image), needs no Python
build backend or ABI match, reads the capture from a file in two streaming passes (so
ingest spools a bundle's capture to disk instead of holding it), and a crash on a
hostile capture takes down one child process, not an ingest worker. One process start
(~1 ms) per capture is nothing beside a capture's tens of thousands of packets.

Where it is looked for: ``$TESTBED_FLOWS_BIN``, then ``testbed-flows`` on PATH (the
orchestrator image), then the workspace build (tools/target/release) in a checkout.
Without it ingest falls back to the pure-Python reference, which gives the same figures
(tests check that) at a twentieth of the speed, and logs that it did.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

from orchestrator.analysis.capture import CaptureFlows, bin_ns, bound_flags, flows_from_document
from orchestrator.analysis.flows import DEFAULT_BIN_S
from orchestrator.errors import Invalid

log = logging.getLogger(__name__)

TOOL = "testbed-flows"
ENV = "TESTBED_FLOWS_BIN"
_CHECKOUT_BUILD = Path(__file__).resolve().parents[2] / "tools/target/release" / TOOL


class FlowToolError(Invalid):
    """The tool is misconfigured, or failed on a file (could not read it, or crashed):
    the same bytes would fail again, so the capture gets a note, the rest of its
    bundle is still written."""


def find_tool() -> str | None:
    """The tool's path, or None when it is not installed."""
    configured = os.environ.get(ENV)
    if configured:
        if not os.access(configured, os.X_OK):
            raise FlowToolError(f"{ENV}={configured} is not an executable file; build it "
                                "with cd tools && cargo build --release -p flows, or unset it")
        return configured
    found = shutil.which(TOOL)
    if found:
        return found
    return str(_CHECKOUT_BUILD) if os.access(_CHECKOUT_BUILD, os.X_OK) else None


def analyse_file(path: Path, *, tool: str, bin_s: float = DEFAULT_BIN_S) -> CaptureFlows:
    """The per-flow figures of the capture at ``path``; raises
    :class:`~orchestrator.analysis.pcap.CaptureError` when it is no capture."""
    proc = subprocess.run([tool, "--bin-ns", str(bin_ns(bin_s)), *bound_flags(), str(path)],
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise FlowToolError(f"{TOOL} failed on {path.name} (exit {proc.returncode}): "
                            f"{proc.stderr.decode(errors='replace').strip()[-500:]}")
    return flows_from_document(json.loads(proc.stdout), bin_s=bin_s)
