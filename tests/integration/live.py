"""A real orchestrator process (uvicorn on a loopback port, SQLite in a temp dir), for
tests and benchmarks that must cross a real socket."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
ADMIN_TOKEN = "live-admin-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Live:
    url: str
    root: Path
    admin: dict[str, str]
    #: The server process, to read its memory from /proc.
    pid: int = 0

    def add_node(self, node_id: str) -> str:
        r = httpx.post(f"{self.url}/api/v1/nodes", headers=self.admin,
                       json={"id": node_id, "country": "SE"}, timeout=30)
        r.raise_for_status()
        token: str = r.json()["token"]
        return token


@contextmanager
def orchestrator(root: Path, **env: str) -> Iterator[Live]:
    port = free_port()
    environ = {
        **os.environ,
        "TESTBED_ENVIRONMENT": "development",
        "TESTBED_ADMIN_TOKEN": ADMIN_TOKEN,
        "TESTBED_DATABASE_URL": f"sqlite:///{root / 'testbed.db'}",
        "TESTBED_ARCHIVE_DIR": str(root / "archive"),
        "TESTBED_UPLOAD_DIR": str(root / "uploads"),
        "TESTBED_DATASETS__DIR": str(root / "releases"),
        "TESTBED_DATASETS__KEYS_DIR": str(root / "release-keys"),
        "TESTBED_EXPERIMENTS_DIR": str(REPO / "experiments"),
        "TESTBED_HOST": "127.0.0.1",
        "TESTBED_PORT": str(port),
        # The test fleet's SIMs have no configured caps: give each a default (10 GB).
        "TESTBED_SCHEDULING__DEFAULT_SIM_CAP_BYTES": str(10**10),
        **env,
    }
    log = (root / "orchestrator.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", "serve"],
                            env=environ, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(150):
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"orchestrator exited: {(root / 'orchestrator.log').read_text()}"
                    ) from None
                time.sleep(0.2)
        yield Live(url, root, {"Authorization": f"Bearer {ADMIN_TOKEN}"}, proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
