"""The compose fleet, brought up once per test session with the README's own script
(``scripts/up --no-demo``) and torn down after (set TESTBED_KEEP_STACK=1 to keep it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, require

URL = "http://127.0.0.1:8080"
FINAL = {"done", "failed", "cancelled", "expired"}


def _docker_ok() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def _env() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (REPO / "deploy/.secrets/compose.env").read_text().splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


class Fleet:
    def __init__(self, token: str) -> None:
        self.token = token
        self.http = httpx.Client(base_url=URL, timeout=30,
                                 headers={"Authorization": f"Bearer {token}"})

    def get(self, path: str, **kw: Any) -> Any:
        for attempt in range(60):  # the orchestrator may be restarting
            try:
                r = self.http.get(path, **kw)
                break
            except httpx.TransportError:
                if attempt == 59:
                    raise
                time.sleep(1)
        r.raise_for_status()
        return r.json()

    def submit(self, node: str, interface: str, experiment: str = "tat",
               **params: Any) -> str:
        r = self.http.post("/api/v1/runs", json={
            "experiment": experiment, "node": node, "interface": interface,
            "parameters": params})
        assert r.status_code == 201, r.text
        run_id: str = r.json()["id"]
        return run_id

    def wait(self, run_id: str, states: set[str], timeout_s: float) -> dict[str, Any]:
        end = time.monotonic() + timeout_s
        while True:
            run: dict[str, Any] = self.get(f"/api/v1/runs/{run_id}")
            if run["state"] in states:
                return run
            if time.monotonic() > end:
                raise AssertionError(f"run {run_id} still {run['state']} after {timeout_s}s: "
                                     f"{run['events']}")
            time.sleep(0.5)

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            ["docker", "exec", "-e", f"TESTBED_TOKEN={self.token}", "testbed-orchestrator",
             "testbed", *args], capture_output=True, text=True, check=True)
        return out.stdout

    def influx(self, query: str) -> list[list[Any]]:
        """Rows of an InfluxQL query on the stack's InfluxDB (reached from inside the
        orchestrator's container: the store is not published on the host)."""
        code = (
            "import json, sys, urllib.parse, urllib.request\n"
            "q = urllib.parse.urlencode({'db': 'testbed', 'q': sys.argv[1]})\n"
            "print(urllib.request.urlopen('http://influxdb:8086/query?' + q).read().decode())"
        )
        out = subprocess.run(["docker", "exec", "testbed-orchestrator", "python3", "-c", code,
                              query], capture_output=True, text=True, check=True).stdout
        series = json.loads(out)["results"][0].get("series", [])
        return [row for s in series for row in s["values"]]

    def wait_online(self, node: str, timeout_s: float = 60) -> None:
        end = time.monotonic() + timeout_s
        while self.get(f"/api/v1/nodes/{node}")["health"] != "online":
            assert time.monotonic() < end, f"node {node} not online after {timeout_s}s"
            time.sleep(1)


def story(run: dict[str, Any]) -> str:
    """A run's transitions one per line, final reason first: what a failed assertion
    should show (the raw event list is cut short in test reports)."""
    lines = [f"{run['id']} ended {run['state']}: {run.get('reason')}"]
    lines += [f"  {e['at']} {e['state']} ({e['source']}): {e['reason']}"
              for e in run["events"]]
    return "\n".join(lines)


def script(name: str, *args: str, timeout: float = 900) -> None:
    subprocess.run([str(REPO / "scripts" / name), *args], check=True, timeout=timeout)


@pytest.fixture(scope="session")
def fleet() -> Iterator[Fleet]:
    require(_docker_ok(), "the end-to-end tests need a running Docker engine "
            "(docker info failed)")
    script("down", "--volumes")
    script("up", "--no-demo")
    fleet = Fleet(_env()["TESTBED_ADMIN_TOKEN"])
    yield fleet
    fleet.http.close()
    if os.environ.get("TESTBED_KEEP_STACK") != "1":
        script("down", "--volumes")


@pytest.fixture(scope="session")
def compressed_days(request: pytest.FixtureRequest, fleet: Fleet) -> dict[str, Future[None]]:
    """The compressed-day tests' days, run side by side: module name -> its day's outcome.

    Each module whose tests use this fixture defines ``compressed_day(fleet)``, a whole
    day in compressed time (8 min of wall time at the fleet's 180x) that mostly waits:
    one short transfer per node every 20 s. Each day keeps to nodes of its own
    (test_diurnal: no-01 and se-01; test_fault_offline: se-02, cut from control), so the
    selected ones run at once, in threads, and take one day's time instead of one each.
    All of them end here, before the first of their tests goes on, so that no other test
    (several stop the orchestrator, the server or InfluxDB) runs beside a day; each test
    then re-raises its own day's failure with ``.result()``."""
    modules = {item.module for item in request.session.items
               if "compressed_days" in getattr(item, "fixturenames", ())}
    fleets = [Fleet(fleet.token) for _ in modules]  # an HTTP client per thread
    try:
        with ThreadPoolExecutor(max_workers=max(1, len(modules)),
                                thread_name_prefix="compressed-day") as pool:
            days = {m.__name__: pool.submit(m.compressed_day, f)
                    for m, f in zip(modules, fleets, strict=True)}
    finally:  # leaving the pool's block waited for every day
        for f in fleets:
            f.http.close()
    return days
