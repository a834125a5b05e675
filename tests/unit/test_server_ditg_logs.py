"""The measurement server's D-ITG log service: what it serves, holds back and deletes."""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import load_server_module

logs = load_server_module("ditg_logs")


@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), logs.make_handler(tmp_path, 0.5))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def test_a_settled_log_is_served_and_a_fresh_one_held_back(served: tuple[Path, str]) -> None:
    directory, base = served
    old = directory / "tbtat-1.log"
    old.write_bytes(b"\x00\x01log")
    os.utime(old, (time.time() - 5, time.time() - 5))
    (directory / "tbtat-2.log").write_bytes(b"still being written")
    assert _get(f"{base}/tbtat-1.log") == (200, b"\x00\x01log")
    assert _get(f"{base}/tbtat-2.log")[0] == 503
    assert _get(f"{base}/tbtat-3.log")[0] == 404


@pytest.mark.parametrize("name", ["../etc/passwd.log", ".hidden.log", "x.txt", "a/b.log"])
def test_only_plain_log_names_in_the_directory(served: tuple[Path, str], name: str) -> None:
    directory, base = served
    (directory / "x.txt").write_text("not a log")
    assert _get(f"{base}/{name}")[0] == 404


def test_old_logs_are_pruned(tmp_path: Path) -> None:
    now = time.time()
    for name, age in (("old.log", 7200), ("new.log", 60), ("keep.txt", 7200)):
        (tmp_path / name).write_text("x")
        os.utime(tmp_path / name, (now - age, now - age))
    assert logs.prune(tmp_path, 3600, now=now) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt", "new.log"]
