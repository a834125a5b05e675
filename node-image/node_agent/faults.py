"""Fault injection for the fault matrix: faults an operator (or an end-to-end test)
arms on a running node by creating a file, so the platform's recovery is exercised
through the real agent rather than a stand-in.

``<state_dir>/faults/damage-next-chunk``: the next bundle chunk the agent sends has
one byte flipped on the wire (the spooled bundle is untouched), as a link that damages
data in transit would. The file is removed when the fault fires, so it fires once.

``<state_dir>/faults/stall-upload``: while the file exists, every bundle stops at a
point of its bytes (the file holds the fraction, e.g. ``0.5``; empty means half) and
goes no further: the chunk that crosses the point is sent cut short at it (the protocol
takes chunks of any size), and a chunk past it fails as a dead link does (the agent
keeps the bundle and retries, paced). It lets a test catch an upload halfway, with the
orchestrator holding the first part, and then cut the real link; removing the file
lets the upload resume from where the orchestrator's part ends. ``0`` stalls before
the first byte (the upload declared, nothing sent).

Nothing is armed unless such a file exists; creating it needs root on the node. Faults
belong to one life of the agent: :func:`disarm_all` at start clears what an earlier life
left armed, so a restarted node never stays stalled by a hook nobody is watching.
"""

from __future__ import annotations

import logging
from pathlib import Path

from node_agent.errors import OrchestratorUnreachable
from node_agent.uploader import UploadApi
from testbed_common import wire

log = logging.getLogger(__name__)

DAMAGE_NEXT_CHUNK = "damage-next-chunk"
STALL_UPLOAD = "stall-upload"
#: Where a ``stall-upload`` file with no fraction in it stalls a bundle.
DEFAULT_STALL_FRACTION = 0.5


def disarm_all(faults_dir: Path) -> list[str]:
    """Remove every armed fault (an earlier life's); the names removed."""
    removed = []
    if faults_dir.is_dir():
        for armed in sorted(faults_dir.iterdir()):
            if armed.is_file():
                armed.unlink(missing_ok=True)
                removed.append(armed.name)
    if removed:
        log.warning("faults armed in an earlier life of the agent disarmed: %s",
                    ", ".join(removed))
    return removed


def stall_point(text: str, size: int) -> int:
    """The byte of a ``size``-byte bundle where a ``stall-upload`` file holding ``text``
    stops it. Raises ValueError for anything but a fraction in [0, 1)."""
    fraction = float(text.strip() or DEFAULT_STALL_FRACTION)
    if not 0 <= fraction < 1:
        raise ValueError(f"{STALL_UPLOAD} holds {text.strip()!r}: write a fraction in [0, 1)")
    return int(size * fraction)


class FaultyUploads:
    """An :class:`UploadApi` that passes every call to ``api``, damaging or stalling
    chunks while a fault file is armed."""

    def __init__(self, api: UploadApi, faults_dir: Path) -> None:
        self._api = api
        self._armed = faults_dir / DAMAGE_NEXT_CHUNK
        self._stall = faults_dir / STALL_UPLOAD
        #: Declared size of each bundle this life has started uploading.
        self._sizes: dict[str, int] = {}

    def create_upload(self, run_id: str, body: wire.UploadCreate) -> wire.UploadStatus:
        self._sizes[run_id] = body.size
        return self._api.create_upload(run_id, body)

    def append_chunk(self, run_id: str, offset: int, data: bytes) -> wire.UploadStatus:
        data = self._stalled(run_id, offset, data)
        try:
            self._armed.unlink()
        except FileNotFoundError:
            return self._api.append_chunk(run_id, offset, data)
        damaged = data[:-1] + bytes([data[-1] ^ 0xFF])
        log.warning("run %s: fault injected: chunk at offset %d sent with its last byte "
                    "flipped", run_id, offset)
        return self._api.append_chunk(run_id, offset, damaged)

    def _stalled(self, run_id: str, offset: int, data: bytes) -> bytes:
        """``data`` as far as an armed stall lets it go; raises past the stall point."""
        try:
            text = self._stall.read_text()
        except FileNotFoundError:
            return data
        size = self._sizes.get(run_id)
        if size is None:
            return data
        try:
            point = stall_point(text, size)
        except ValueError as e:
            log.error("fault not injected: %s", e)
            return data
        if offset >= point:
            raise OrchestratorUnreachable(
                f"fault injected: upload of run {run_id} stalled at byte {offset} of {size} "
                f"(remove faults/{STALL_UPLOAD} to let it go on)")
        return data[:point - offset]
