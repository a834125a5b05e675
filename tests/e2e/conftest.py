"""The compose fleet, brought up once per test session with the README's own script
(``scripts/up --no-demo``) and torn down after (set TESTBED_KEEP_STACK=1 to keep it;
TESTBED_E2E_STACK=up says the caller brought it up already, as scripts/test does)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import REPO, require_docker
from tests.conftest import story as story  # the e2e tests import it from here

URL = "http://127.0.0.1:8080"
FINAL = {"done", "failed", "cancelled", "expired"}


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
        """Rows of an InfluxQL query on the stack's InfluxDB, as its reader (reached from
        inside the orchestrator's container: the store is on the stores' network only)."""
        status, body = influx_request("/query", {"db": "testbed", "q": query},
                                      user=("testbed_reader",
                                            env_secret("TESTBED_INFLUXDB_READER_PASSWORD")))
        assert status == 200, (status, body)
        series = json.loads(body)["results"][0].get("series", [])
        return [row for s in series for row in s["values"]]

    def wait_online(self, node: str, timeout_s: float = 60) -> None:
        end = time.monotonic() + timeout_s
        while self.get(f"/api/v1/nodes/{node}")["health"] != "online":
            assert time.monotonic() < end, f"node {node} not online after {timeout_s}s"
            time.sleep(1)


def influx_request(path: str, params: dict[str, str], *, user: tuple[str, str] | None,
                   body: str | None = None, container: str = "testbed-orchestrator"
                   ) -> tuple[int, str]:
    """The status and body of one request to the stack's InfluxDB from inside
    ``container`` (POST when ``body`` is given), as ``user`` (name, password) or with no
    credentials. The password goes on the exec's stdin, not on a command line."""
    code = (
        "import base64, sys, urllib.error, urllib.parse, urllib.request\n"
        "path, params, name, body = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]\n"
        "password = sys.stdin.read()\n"
        "req = urllib.request.Request('http://influxdb:8086' + path + '?' + params,\n"
        "    data=body.encode() if body != '-' else None)\n"
        "if name:\n"
        "    cred = base64.b64encode(f'{name}:{password}'.encode()).decode()\n"
        "    req.add_header('Authorization', 'Basic ' + cred)\n"
        "try:\n"
        "    r = urllib.request.urlopen(req, timeout=10)\n"
        "    print(r.status); print(r.read().decode())\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(e.code); print(e.read().decode())\n"
    )
    name, password = user or ("", "")
    out = subprocess.run(
        ["docker", "exec", "-i", container, "python3", "-c", code, path,
         urllib.parse.urlencode(params), name, "-" if body is None else body],
        input=password, capture_output=True, text=True, check=True).stdout
    status, _, text = out.partition("\n")
    return int(status), text.strip()


def env_secret(name: str) -> str:
    """A secret scripts/up generated (deploy/.secrets/compose.env)."""
    return _env()[name]


def script(name: str, *args: str, timeout: float = 900) -> None:
    subprocess.run([str(REPO / "scripts" / name), *args], check=True, timeout=timeout)


@pytest.fixture(scope="session")
def fleet() -> Iterator[Fleet]:
    require_docker("the end-to-end tests")
    if os.environ.get("TESTBED_E2E_STACK") != "up":
        script("down", "--volumes")
        script("up", "--no-demo")
    # else scripts/test brought the stack up before starting other tests beside these
    # (its Docker networks exist before theirs: no address pool to race for)
    fleet = Fleet(_env()["TESTBED_ADMIN_TOKEN"])
    yield fleet
    fleet.http.close()
    if os.environ.get("TESTBED_KEEP_STACK") != "1":
        script("down", "--volumes")



#: A test body run side by side with others: it gets a Fleet of its own (its own HTTP
#: client: the bodies run in threads).
Body = Callable[[Fleet], None]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "side_by_side(group, body): the test's body runs "
                            "at once with the other bodies of its group (tests/e2e/conftest.py)")


class SideBySide:
    """Tests that mostly wait (a compressed day, an alert's minute), run at once.

    A test marked ``side_by_side(group, body)`` calls ``side_by_side.result(body)``; the
    first test of a group to do so runs every selected body of the group at once, in
    threads, and waits for all of them: no other test (several stop the orchestrator,
    the server or InfluxDB) runs beside a group, and each test re-raises its own body's
    failure. The bodies of a group keep to nodes of their own, so they cannot disturb
    each other; a group takes the wall time of its longest body instead of their sum.
    TESTBED_E2E_ONE_AT_A_TIME=1 runs each group's bodies one after another instead (to
    tell whether a failure comes from running them together)."""

    def __init__(self, items: list[pytest.Item], fleet: Fleet) -> None:
        self._token = fleet.token
        self._groups: dict[str, list[Body]] = {}
        for item in items:
            for marker in item.iter_markers("side_by_side"):
                group, body = marker.args
                if body not in (bodies := self._groups.setdefault(group, [])):
                    bodies.append(body)
        self._outcomes: dict[Body, Future[None]] = {}

    def result(self, body: Body) -> None:
        if body not in self._outcomes:
            [bodies] = [b for b in self._groups.values() if body in b]
            fleets = [Fleet(self._token) for _ in bodies]
            try:
                at_once = 1 if os.environ.get("TESTBED_E2E_ONE_AT_A_TIME") == "1" else len(bodies)
                with ThreadPoolExecutor(at_once, thread_name_prefix="side-by-side") as pool:
                    self._outcomes |= {b: pool.submit(b, f)
                                       for b, f in zip(bodies, fleets, strict=True)}
            finally:  # leaving the pool's block waited for every body
                for f in fleets:
                    f.http.close()
        self._outcomes[body].result()


@pytest.fixture(scope="session")
def side_by_side(request: pytest.FixtureRequest, fleet: Fleet) -> SideBySide:
    return SideBySide(request.session.items, fleet)
