"""A throwaway PostgreSQL server for the integration tests (Debian's postgresql
package), so the "PostgreSQL only needs another URL" promise is tested, not assumed."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def available() -> str | None:
    """None when a server can be started here, else why not."""
    if _bin("initdb") is None or _bin("pg_ctl") is None:
        return "PostgreSQL server binaries not installed (apt-get install postgresql)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser to drop to the postgres user"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed"
    return None


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@contextmanager
def server() -> Iterator[str]:
    """Start a server in a temp dir; yield a URL template with ``{db}`` for the database."""
    tmp = Path(tempfile.mkdtemp(prefix="tbpg-"))
    os.chmod(tmp, 0o777)
    data = tmp / "data"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    assert initdb and pg_ctl
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres")
    subprocess.run(_as_postgres([initdb, "-D", str(data), "-A", "trust", "-U", "postgres"]),
                   check=True, capture_output=True)
    subprocess.run(_as_postgres([
        pg_ctl, "-D", str(data), "-l", str(tmp / "log"), "-w", "start",
        "-o", f"-p {port} -k {tmp} -h 127.0.0.1 -F"]), check=True, capture_output=True)
    try:
        deadline = time.monotonic() + 20
        import psycopg

        while True:
            try:
                psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres",
                                connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/{{db}}"
    finally:
        subprocess.run(_as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def create_database(url_template: str, name: str, *, template: str | None = None) -> str:
    """A new database, empty or a copy of ``template`` (a database no one is connected
    to): PostgreSQL copies it file by file, far quicker than replaying what made it."""
    import psycopg

    admin = url_template.format(db="postgres").replace("postgresql+psycopg://", "postgresql://")
    copy = f' TEMPLATE "{template}"' if template is not None else ""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{copy}')
    return url_template.format(db=name)
