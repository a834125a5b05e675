"""A bundle upload cut halfway resumes, and is stored exactly once.

Real sockets end to end: the node agent's own client and uploader talk to a real
orchestrator process through a TCP relay that drops the connection once, mid-chunk,
after a given number of bytes; the agent then "restarts" (a new client) and resumes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from node_agent.client import OrchestratorClient
from node_agent.errors import OrchestratorUnreachable
from node_agent.spool import Spool
from node_agent.uploader import UploadResult, upload
from testbed_common import wire
from testbed_common.bundle import build_bundle
from tests.integration.live import free_port, orchestrator

CHUNK = 1 << 20


class CuttingRelay:
    """Relays TCP to ``target``; drops the connection once after ``cut_after`` bytes
    from the client, then relays normally. Counts every byte the client sent."""

    def __init__(self, target: int, cut_after: int) -> None:
        self.target = target
        self.cut_after = cut_after
        self.sent = 0
        self.cut_done = False
        self.port = free_port()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, upstream, True),
                             daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False),
                             daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_client:
                    with self._lock:
                        self.sent += len(data)
                        cut = not self.cut_done and self.sent >= self.cut_after
                        if cut:
                            self.cut_done = True
                    if cut:
                        for s in (src, dst):
                            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                         b"\x01\x00\x00\x00\x00\x00\x00\x00")
                            s.close()
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

    def close(self) -> None:
        self._server.close()


@contextmanager
def relay(target: int, cut_after: int) -> Iterator[CuttingRelay]:
    r = CuttingRelay(target, cut_after)
    try:
        yield r
    finally:
        r.close()


def test_cut_upload_resumes_after_agent_restart_and_is_stored_once(tmp_path: Path) -> None:
    server_root = tmp_path / "orchestrator"
    server_root.mkdir()
    with orchestrator(server_root) as live:
        token = live.add_node("se-01")
        port = int(live.url.rsplit(":", 1)[1])
        agent = OrchestratorClient(live.url, token, quick_retries_s=())
        agent.register(wire.Registration(agent_version="test", interfaces=[
            wire.InterfaceReport(name="op0", operator=wire.Operator(mcc_mnc="240-01",
                                                                    name="Telia"))]))
        r = httpx.post(f"{live.url}/api/v1/runs", headers=live.admin, timeout=30,
                       json={"experiment": "tat", "node": "se-01", "interface": "op0"})
        run_id = r.json()["id"]
        now = datetime.now(UTC)
        agent.heartbeat(wire.Heartbeat(sent_at=now, interfaces=[], disk_free_bytes=1))
        for state in ("running", "uploading"):
            agent.report_state(run_id, wire.StateReport(state=state, reason="test", at=now))

        results = tmp_path / "bundle" / "results"
        results.mkdir(parents=True)
        (results / "capture.bin").write_bytes(os.urandom(3 * CHUNK))  # incompressible
        spool = Spool(tmp_path / "spool")
        item = spool.put(run_id, build_bundle(results.parent, run_id=run_id, node_id="se-01"))
        size = item.size

        # cut in the middle of the third chunk
        with relay(port, cut_after=int(2.5 * CHUNK)) as cut:
            flaky = OrchestratorClient(f"http://127.0.0.1:{cut.port}", token,
                                       quick_retries_s=())
            with pytest.raises(OrchestratorUnreachable):
                upload(flaky, spool, item, chunk_bytes=CHUNK)
            assert cut.cut_done
            # the agent restarts: a new client, the bundle still in its spool
            restarted = OrchestratorClient(f"http://127.0.0.1:{cut.port}", token,
                                           quick_retries_s=())
            (pending,) = spool.pending()
            assert upload(restarted, spool, pending, chunk_bytes=CHUNK) == UploadResult.DONE
            for client in (flaky, restarted, agent):
                client.close()
            # resumed from the held offset: far less than sending everything twice
            assert cut.sent < size + 1.2 * CHUNK, (cut.sent, size)

        run = httpx.get(f"{live.url}/api/v1/runs/{run_id}", headers=live.admin).json()
        assert run["state"] == "done"
        stored = list((server_root / "archive").rglob("bundle.tar.gz"))
        assert len(stored) == 1
        assert hashlib.sha256(stored[0].read_bytes()).hexdigest() == item.sha256
        assert run["bundle_sha256"] == item.sha256
        assert spool.pending() == []
