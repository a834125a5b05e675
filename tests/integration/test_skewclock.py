"""tools/skewclock, the fault matrix's wrong clock: a process it is preloaded into reads
a wall clock that many seconds off, while sleeps, thread waits and subprocess timeouts
(monotonic) work as without it. Real parts: the library built with the host's C
compiler, preloaded into real Python and coreutils processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, require

PROBE = """
import datetime, subprocess, threading, time
t0 = time.monotonic()
time.sleep(0.2)
threading.Event().wait(0.2)
lock = threading.Lock(); lock.acquire(); lock.acquire(timeout=0.2)
p = subprocess.Popen(["sleep", "5"])
try:
    p.wait(timeout=0.2)
except subprocess.TimeoutExpired:
    p.kill()
print(time.time(), datetime.datetime.now(datetime.UTC).timestamp(), time.monotonic() - t0)
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(shutil.which("cc") is not None, "tools/skewclock needs a C compiler (gcc)")
    out = tmp_path_factory.mktemp("skewclock") / "libskewclock.so"
    subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o",
                    str(out), str(REPO / "tools/skewclock/skewclock.c")], check=True)
    return out


@pytest.mark.parametrize("skew", [300.0, -300.0])
def test_wall_clock_is_off_and_waits_still_work(library: Path, skew: float) -> None:
    env = {**os.environ, "TESTBED_CLOCK_SKEW_S": f"{skew:+g}", "LD_PRELOAD": str(library)}
    before = time.time()
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, timeout=30, check=True).stdout.split()
    after = time.time()
    wall, dt_now, waited = (float(x) for x in out)
    for reading in (wall, dt_now):
        assert before + skew - 1 <= reading <= after + skew + 1
    assert 0.75 <= waited < 5  # four 0.2 s waits, none of them 300 s off or failing
    shell = subprocess.run(["date", "+%s"], env=env, capture_output=True, text=True,
                           check=True).stdout
    assert abs(int(shell) - (time.time() + skew)) <= 2


def test_without_the_variable_the_clock_is_true(library: Path) -> None:
    env = {**os.environ, "LD_PRELOAD": str(library)}
    env.pop("TESTBED_CLOCK_SKEW_S", None)
    shell = subprocess.run(["date", "+%s"], env=env, capture_output=True, text=True,
                           check=True).stdout
    assert abs(int(shell) - time.time()) <= 2
