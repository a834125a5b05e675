"""A throwaway InfluxDB 1.x server (Debian's ``influxdb`` package, /usr/bin/influxd) for
the integration tests and the analysis bench: data, meta and WAL in a temp folder, HTTP
on 127.0.0.1 at a free port, usage reporting and the self-monitoring store off."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

INFLUXD = "/usr/bin/influxd"
START_TIMEOUT_S = 30.0


def available() -> str | None:
    """None when a server can be started here, else why not."""
    if shutil.which("influxd") is None and not Path(INFLUXD).exists():
        return "influxd not installed (apt-get install influxdb)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Influxd:
    """One influxd process on a folder; can be stopped and started again on the same
    data and port (to test an outage)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = root / "influxdb.conf"
        self.config.write_text(
            "reporting-disabled = true\n"
            f'bind-address = "127.0.0.1:{_free_port()}"\n'
            f'[meta]\n  dir = "{root / "meta"}"\n'
            f'[data]\n  dir = "{root / "data"}"\n  wal-dir = "{root / "wal"}"\n'
            "  query-log-enabled = false\n"
            f'[http]\n  enabled = true\n  bind-address = "127.0.0.1:{self.port}"\n'
            "  log-enabled = false\n"
            "[monitor]\n  store-enabled = false\n"
            "[continuous_queries]\n  enabled = false\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("influxd") or INFLUXD
        with (self.root / "influxd.log").open("ab") as log:  # the child keeps its copy
            self.proc = subprocess.Popen([binary, "-config", str(self.config)],
                                         stdout=log, stderr=log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"influxd exited {self.proc.returncode}: "
                                   f"{(self.root / 'influxd.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/ping", timeout=1).status_code == 204:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"influxd did not answer /ping within {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@contextmanager
def running() -> Iterator[Influxd]:
    with tempfile.TemporaryDirectory(prefix="an-influxd-") as tmp:
        server = Influxd(Path(tmp))
        server.start()
        try:
            yield server
        finally:
            server.stop()
