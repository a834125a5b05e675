"""A bundle upload cut halfway resumes, and one damaged in transit is sent again from
the start; either way the run ends done with its bundle stored exactly once.

Real sockets end to end: the node agent's own client and uploader talk to a real
orchestrator process (uvicorn on loopback) through a TCP relay that misbehaves once,
mid-chunk: it drops the connection, or flips one byte of a chunk's body.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from node_agent.client import OrchestratorClient
from node_agent.errors import OrchestratorUnreachable
from node_agent.spool import Spool, SpooledBundle
from node_agent.uploader import UploadResult, upload
from testbed_common import wire
from testbed_common.bundle import build_bundle
from tests.integration.live import Live, orchestrator
from tests.integration.relay import Fault, relay

CHUNK = 1 << 20


@dataclass(frozen=True)
class Uploading:
    live: Live
    token: str
    port: int
    spool: Spool
    item: SpooledBundle


@contextmanager
def uploading_run(tmp_path: Path) -> Iterator[Uploading]:
    """A real orchestrator with one run in ``uploading`` and its bundle (3 MiB and a
    bit, incompressible) in the node's spool."""
    server_root = tmp_path / "orchestrator"
    server_root.mkdir()
    with orchestrator(server_root) as live:
        token = live.add_node("se-01")
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
        agent.close()

        results = tmp_path / "bundle" / "results"
        results.mkdir(parents=True)
        (results / "capture.bin").write_bytes(os.urandom(3 * CHUNK))  # incompressible
        spool = Spool(tmp_path / "spool")
        item = spool.put(run_id, build_bundle(results.parent, run_id=run_id, node_id="se-01"))
        yield Uploading(live, token, int(live.url.rsplit(":", 1)[1]), spool, item)


def assert_done_and_stored_once(u: Uploading) -> None:
    run = httpx.get(f"{u.live.url}/api/v1/runs/{u.item.run_id}", headers=u.live.admin).json()
    assert run["state"] == "done"
    stored = list((u.live.root / "archive").rglob("bundle.tar.gz"))
    assert len(stored) == 1
    assert hashlib.sha256(stored[0].read_bytes()).hexdigest() == u.item.sha256
    assert run["bundle_sha256"] == u.item.sha256
    assert u.spool.pending() == []
    assert not u.spool.rejected_dir.exists()


def test_cut_upload_resumes_after_agent_restart_and_is_stored_once(tmp_path: Path) -> None:
    with uploading_run(tmp_path) as u:
        # cut in the middle of the third chunk
        with relay(u.port, at=int(2.5 * CHUNK), fault=Fault.CUT) as cut:
            flaky = OrchestratorClient(f"http://127.0.0.1:{cut.port}", u.token,
                                       quick_retries_s=())
            with pytest.raises(OrchestratorUnreachable):
                upload(flaky, u.spool, u.item, chunk_bytes=CHUNK)
            assert cut.done
            # the agent restarts: a new client, the bundle still in its spool
            restarted = OrchestratorClient(f"http://127.0.0.1:{cut.port}", u.token,
                                           quick_retries_s=())
            (pending,) = u.spool.pending()
            assert upload(restarted, u.spool, pending, chunk_bytes=CHUNK) == UploadResult.DONE
            for client in (flaky, restarted):
                client.close()
            # resumed from the held offset: far less than sending everything twice
            assert cut.sent < u.item.size + 1.2 * CHUNK, (cut.sent, u.item.size)
        assert_done_and_stored_once(u)


def test_chunk_damaged_in_transit_is_sent_again_from_the_start(tmp_path: Path) -> None:
    with uploading_run(tmp_path) as u:
        # one byte flipped in the body of the third chunk; TCP delivers it as sent
        with relay(u.port, at=int(2.5 * CHUNK), fault=Fault.FLIP) as flip:
            client = OrchestratorClient(f"http://127.0.0.1:{flip.port}", u.token,
                                        quick_retries_s=())
            assert upload(client, u.spool, u.item, chunk_bytes=CHUNK) == UploadResult.DONE
            client.close()
            assert flip.done
            # the orchestrator found it at the last byte and dropped what it held; the
            # agent sent everything once more, from offset 0
            assert 2 * u.item.size < flip.sent < 2 * u.item.size + CHUNK, flip.sent
        assert_done_and_stored_once(u)
