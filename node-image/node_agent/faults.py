"""Fault injection for the fault matrix: faults an operator (or an end-to-end test)
arms on a running node by creating a file, so the platform's recovery is exercised
through the real agent rather than a stand-in.

``<state_dir>/faults/damage-next-chunk``: the next bundle chunk the agent sends has
one byte flipped on the wire (the spooled bundle is untouched), as a link that damages
data in transit would. The file is removed when the fault fires, so it fires once.
Nothing is armed unless such a file exists; creating it needs root on the node.
"""

from __future__ import annotations

import logging
from pathlib import Path

from node_agent.uploader import UploadApi
from testbed_common import wire

log = logging.getLogger(__name__)

DAMAGE_NEXT_CHUNK = "damage-next-chunk"


class FaultyUploads:
    """An :class:`UploadApi` that passes every call to ``api``, damaging one chunk
    when the fault file is armed."""

    def __init__(self, api: UploadApi, faults_dir: Path) -> None:
        self._api = api
        self._armed = faults_dir / DAMAGE_NEXT_CHUNK

    def create_upload(self, run_id: str, body: wire.UploadCreate) -> wire.UploadStatus:
        return self._api.create_upload(run_id, body)

    def append_chunk(self, run_id: str, offset: int, data: bytes) -> wire.UploadStatus:
        try:
            self._armed.unlink()
        except FileNotFoundError:
            return self._api.append_chunk(run_id, offset, data)
        damaged = data[:-1] + bytes([data[-1] ^ 0xFF])
        log.warning("run %s: fault injected: chunk at offset %d sent with its last byte "
                    "flipped", run_id, offset)
        return self._api.append_chunk(run_id, offset, damaged)
