"""deploy/front/front-start, the front's command: nginx starts as soon as one replica
accepts connections, not before, and no probe is left behind it. Run with a stand-in
nginx (a script on PATH) against replicas that are local listening sockets."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "deploy/front/front-start"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def front(tmp_path: Path) -> Iterator[tuple[Path, list[int], Path]]:
    """(the configuration, its two replicas' ports, the file nginx writes when started)."""
    ports = [_free_port(), _free_port()]
    conf = tmp_path / "orchestrator.conf"
    conf.write_text("upstream orchestrator {\n"
                    + "".join(f"    server 127.0.0.1:{p} max_fails=1;\n" for p in ports)
                    + "}\n")
    started = tmp_path / "nginx-started"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nginx = bin_dir / "nginx"
    nginx.write_text(f"#!/bin/sh\necho \"$*\" > {started}\nexec sleep 30\n")
    nginx.chmod(0o755)
    yield conf, ports, started


def _start(conf: Path, bin_dir: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TESTBED_FRONT_CONF": str(conf),
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.Popen(["bash", str(SCRIPT)], env=env, stderr=subprocess.PIPE)


def _children(pid: int) -> list[str]:
    out = subprocess.run(["ps", "-o", "args=", "--ppid", str(pid)],
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def test_nginx_starts_once_the_second_replica_listens_and_no_probe_is_left(
        front: tuple[Path, list[int], Path]) -> None:
    conf, ports, started = front
    proc = _start(conf, started.parent / "bin")
    try:
        time.sleep(0.6)  # neither replica listens: both refused, again and again
        assert proc.poll() is None and not started.exists(), "nginx started before any replica"
        with socket.socket() as replica:
            replica.bind(("127.0.0.1", ports[1]))
            replica.listen()
            t0 = time.monotonic()
            while not started.exists():
                assert time.monotonic() - t0 < 2, "nginx did not start after a replica listened"
                time.sleep(0.01)
            time.sleep(0.3)  # a probe's last sleep or connection would end by now
            # exec: nginx is the script's own process; the probe loops are gone
            assert _children(proc.pid) == [], _children(proc.pid)
        assert started.read_text().strip() == "-g daemon off;"
    finally:
        proc.kill()
        proc.communicate()


def test_a_configuration_without_replicas_is_refused_with_the_reason(tmp_path: Path) -> None:
    conf = tmp_path / "orchestrator.conf"
    conf.write_text("upstream orchestrator {\n}\n")
    proc = _start(conf, tmp_path)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 1
    assert b"no 'server ADDRESS:PORT' line" in err, err
