"""deploy/emulation/await-orchestrator.sh: an emulated node's agent starts once the
orchestrator answers /healthz with 200 (or after its patience, anyway), and a restarted
container does not wait."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "emulation" / "await-orchestrator.sh"
#: The command the script starts: prints when it started.
STARTED = ["python3", "-c", "import time; print(time.time())"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _orchestrator(port: int, status: int, *, after_s: float) -> Iterator[list[float]]:
    """An HTTP server on ``port`` answering ``status`` to everything, listening from
    ``after_s`` seconds on; yields [the time it began to listen] once it does."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    listening: list[float] = []
    servers: list[http.server.HTTPServer] = []

    def serve() -> None:
        time.sleep(after_s)
        server = http.server.HTTPServer(("127.0.0.1", port), Handler)
        servers.append(server)
        listening.append(time.time())
        server.serve_forever(poll_interval=0.05)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listening
    finally:
        while not servers and thread.is_alive():
            time.sleep(0.05)
        for server in servers:
            server.shutdown()
            server.server_close()


def _run(port: int, tmp_path: Path, patience_s: int = 20,
         target: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TESTBED_AWAIT_ORCHESTRATOR": target or f"127.0.0.1:{port}",
           "TESTBED_AWAIT_S": str(patience_s), "TESTBED_AWAIT_MARK": str(tmp_path / "mark")}
    return subprocess.run([str(SCRIPT), *STARTED], env=env, capture_output=True, text=True,
                          timeout=60)


def test_the_agent_starts_once_the_orchestrator_answers(tmp_path: Path) -> None:
    port = _free_port()
    with _orchestrator(port, 200, after_s=0.8) as listening:
        done = _run(port, tmp_path)
    assert done.returncode == 0, done.stderr
    started = float(done.stdout)
    assert listening and listening[0] <= started < listening[0] + 1.0
    assert done.stderr == ""


def test_an_orchestrator_not_ready_is_waited_for_then_the_agent_starts_anyway(
        tmp_path: Path) -> None:
    port = _free_port()
    began = time.time()
    with _orchestrator(port, 503, after_s=0):
        done = _run(port, tmp_path, patience_s=1)
    assert done.returncode == 0
    assert float(done.stdout) - began >= 0.9
    assert f"127.0.0.1:{port} did not answer in 1 s; starting anyway" in done.stderr


def test_a_restarted_container_does_not_wait(tmp_path: Path) -> None:
    port = _free_port()  # nothing listens
    with _orchestrator(port, 503, after_s=0):
        first = _run(port, tmp_path, patience_s=1)
    assert first.returncode == 0
    began = time.time()
    again = _run(port, tmp_path, patience_s=30)
    assert again.returncode == 0 and float(again.stdout) - began < 1.0
    assert again.stderr == ""


def test_a_bad_setting_is_refused_with_its_name(tmp_path: Path) -> None:
    done = _run(0, tmp_path, target="orchestrator")
    assert done.returncode == 2
    assert "TESTBED_AWAIT_ORCHESTRATOR=orchestrator is not host:port" in done.stderr
    env = {**os.environ, "TESTBED_AWAIT_S": "soon", "TESTBED_AWAIT_MARK": str(tmp_path / "m")}
    done = subprocess.run([str(SCRIPT), "true"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "TESTBED_AWAIT_S=soon" in done.stderr
