"""A throwaway InfluxDB 1.x server (Debian's ``influxdb`` package, /usr/bin/influxd) for
the integration tests and the analysis bench: data, meta and WAL in a temp folder, HTTP
on 127.0.0.1 at a free port, usage reporting and the self-monitoring store off.

With authentication on, as every deployment runs it (deploy/influxdb/influxdb.conf): the
administrator is made at the first start (:attr:`Influxd.admin`), and
:meth:`Influxd.provision` makes a database with its writer (WRITE) and reader (READ),
as the store's own start does (deploy/influxdb/influxdb-start). A test's client gets
both (:meth:`Influxd.client`), like the orchestrator's."""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from orchestrator.settings import InfluxCredential, InfluxSettings
from orchestrator.timeseries.influx import Credential, InfluxClient, literal

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
            "  auth-enabled = true\n  log-enabled = false\n"
            "[monitor]\n  store-enabled = false\n"
            "[continuous_queries]\n  enabled = false\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None
        #: The administrator, made at the first start.
        self.admin = Credential("admin", secrets.token_hex(16))
        self._admin_made = False

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
                    self._make_admin()
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"influxd did not answer /ping within {START_TIMEOUT_S:.0f} s")

    def _make_admin(self) -> None:
        """The one statement influxd takes without credentials while it has no user."""
        if self._admin_made:
            return
        r = httpx.post(f"{self.url}/query", timeout=10, params={
            "q": f'CREATE USER "{self.admin.username}" WITH PASSWORD '
                 f"{literal(self.admin.password)} WITH ALL PRIVILEGES"})
        r.raise_for_status()
        self._admin_made = True

    def as_admin(self, influxql: str) -> None:
        """Run statements as the administrator."""
        with InfluxClient(self.url, "_internal", writer=self.admin, retries=0) as c:
            c.query(influxql)

    def provision(self, database: str) -> tuple[Credential, Credential]:
        """``database`` with a writer (WRITE on it) and a reader (READ on it), made as
        the administrator: the users a deployment's orchestrator gets."""
        writer = Credential(f"{database}_writer", secrets.token_hex(16))
        reader = Credential(f"{database}_reader", secrets.token_hex(16))
        statements = [f'CREATE DATABASE "{database}"']
        for cred, privilege in ((writer, "WRITE"), (reader, "READ")):
            statements += [
                f'CREATE USER "{cred.username}" WITH PASSWORD {literal(cred.password)}',
                f'GRANT {privilege} ON "{database}" TO "{cred.username}"']
        self.as_admin("; ".join(statements))
        return writer, reader

    def client(self, database: str, **kw: Any) -> InfluxClient:
        """A client of a new ``database``, as its writer and its reader."""
        writer, reader = self.provision(database)
        return InfluxClient(self.url, database, writer=writer, reader=reader, **kw)

    def settings(self, database: str,
                 base: InfluxSettings | None = None) -> InfluxSettings:
        """The orchestrator's settings of a new ``database`` here, with its writer and
        reader (``base``'s other settings kept)."""
        writer, reader = self.provision(database)
        return (base or InfluxSettings()).model_copy(update={
            "url": self.url, "database": database,
            "writer": InfluxCredential(username=writer.username, password=writer.password),
            "reader": InfluxCredential(username=reader.username, password=reader.password)})

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
