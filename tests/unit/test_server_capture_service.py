"""The measurement server's capture service: its judgement of requests, routes, room
and age (pure), and its answers to bad input over HTTP (no tcpdump started)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.conftest import load_server_module

cs = load_server_module("capture_service")
LIMITS = cs.Limits(max_captures=2, max_bytes=1000, max_s=60.0, max_total_bytes=3000,
                   min_free_bytes=500, keep_s=10.0)


def _start(body: object) -> object:
    return cs.parse_start(json.dumps(body).encode(), LIMITS)


def test_a_start_request_gets_the_servers_caps() -> None:
    req = _start({"address": "172.30.1.21", "snaplen": 128, "max_bytes": 10**9,
                  "max_s": 9000, "label": "r-1"})
    assert req == cs.StartRequest(address="172.30.1.21", snaplen=128, max_bytes=1000,
                                  max_s=60.0, label="r-1")
    assert _start({"address": "2001:db8::1"}) == cs.StartRequest(
        address="2001:db8::1", snaplen=96, max_bytes=1000, max_s=60.0, label="")


@pytest.mark.parametrize(("body", "says"), [
    (None, "JSON object"),
    ([1], "JSON object"),
    ({}, "address is required"),
    ({"address": "node-1"}, "not an IPv4 or IPv6 address"),
    ({"address": "127.0.0.1"}, "loopback"),
    ({"address": "0.0.0.0"}, "unspecified"),
    ({"address": "10.0.0.1", "snaplen": 0}, "snaplen must be positive"),
    ({"address": "10.0.0.1", "snaplen": 96.5}, "snaplen must be an integer"),
    ({"address": "10.0.0.1", "snaplen": 10**6}, "over tcpdump's 262144"),
    ({"address": "10.0.0.1", "max_s": "long"}, "max_s must be a number"),
    ({"address": "10.0.0.1", "max_bytes": True}, "max_bytes must be an integer"),
    ({"address": "10.0.0.1", "label": "a\nb"}, "label must be printable"),
    ({"address": "10.0.0.1", "iface": "eth0"}, "unknown fields ['iface']"),
])
def test_bad_start_requests_say_what_to_send(body: object, says: str) -> None:
    with pytest.raises(cs.Refused) as e:
        _start(body)
    assert e.value.status == 400 and says in e.value.message


def test_a_body_that_is_not_json() -> None:
    with pytest.raises(cs.Refused, match="JSON object"):
        cs.parse_start(b"address=1.2.3.4", LIMITS)


def test_the_route_names_the_interface_the_node_is_reached_on() -> None:
    out = ('[{"dst":"172.30.1.21","dev":"eth1","prefsrc":"172.30.1.10","flags":[],'
           '"uid":0,"cache":[]}]')
    assert cs.route_device(out, "172.30.1.21") == "eth1"
    via = '[{"dst":"8.8.8.8","gateway":"192.0.2.1","dev":"eth0","flags":[]}]'
    assert cs.route_device(via, "8.8.8.8") == "eth0"


def test_the_servers_own_address_is_refused() -> None:
    out = '[{"type":"local","dst":"172.30.1.10","dev":"lo","prefsrc":"172.30.1.10"}]'
    with pytest.raises(cs.Refused, match="this server's own") as e:
        cs.route_device(out, "172.30.1.10")
    assert e.value.status == 400


def test_an_unreadable_route_is_the_servers_fault() -> None:
    with pytest.raises(cs.Refused) as e:
        cs.route_device("RTNETLINK answers: bad", "10.0.0.1")
    assert e.value.status == 500


def test_admission_bounds_count_disk_budget_and_free_space() -> None:
    ok = {"running": 1, "committed_bytes": 1000, "free_bytes": 10**6, "want_bytes": 1000}
    assert cs.admission(**ok, limits=LIMITS) is None
    busy = cs.admission(**{**ok, "running": 2}, limits=LIMITS)
    assert busy.status == 503 and busy.retry_after_s and "--max-captures 2" in busy.message
    full = cs.admission(**{**ok, "committed_bytes": 2500}, limits=LIMITS)
    assert full.status == 507 and "--max-total-bytes" in full.message
    low = cs.admission(**{**ok, "free_bytes": 1400}, limits=LIMITS)
    assert low.status == 507 and "--min-free-bytes" in low.message


def test_chores_stop_at_the_time_cap_and_delete_after_keep() -> None:
    ages = [cs.Age("young", started=100.0, max_s=60.0, stopped=None),
            cs.Age("late", started=30.0, max_s=60.0, stopped=None),
            cs.Age("fresh", started=0.0, max_s=60.0, stopped=95.0),
            cs.Age("old", started=0.0, max_s=60.0, stopped=80.0)]
    assert cs.chores(ages, now=100.0, keep_s=10.0) == cs.Chores(stop=("late",),
                                                                 delete=("old",))


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[str]:
    stale = tmp_path / "captures" / "0123.pcap"
    stale.parent.mkdir()
    stale.write_bytes(b"an earlier life's")
    captures = cs.Captures(tmp_path / "captures", LIMITS)
    assert not stale.exists()  # nobody could fetch it: deleted at start
    server = ThreadingHTTPServer(("127.0.0.1", 0), cs.make_handler(captures))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_http_answers_bad_input_with_what_to_do(service: str) -> None:
    r = httpx.post(f"{service}/captures", json={"address": "nope"})
    assert r.status_code == 400 and "IPv4 or IPv6" in r.json()["error"]
    r = httpx.post(f"{service}/captures", json={"address": "127.0.0.1"})
    assert r.status_code == 400
    r = httpx.post(f"{service}/captures", content=b"x" * 5000)
    assert r.status_code == 413
    for method, path in (("GET", "/captures/" + "0" * 32), ("POST", "/captures/abc/stop"),
                         ("GET", "/captures/abc/pcap"), ("DELETE", "/captures/abc")):
        r = httpx.request(method, f"{service}{path}")
        assert r.status_code == 404 and "start one with POST /captures" in r.json()["error"]
    r = httpx.get(f"{service}/elsewhere")
    assert r.status_code == 404 and "/captures/ID" in r.json()["error"]
    assert httpx.get(f"{service}/healthz").json() == {"running": 0, "kept": 0}


def test_the_server_image_runs_the_service_from_what_its_dockerfile_copies(
        tmp_path: Path) -> None:
    """The files server-image/Dockerfile copies into /usr/local/lib/testbed/, staged
    alone and run by an interpreter without site-packages (as Debian's python3 in the
    image): the service starts, so it needs nothing the image does not get. The node
    agent's package and testbed_common (pydantic) are not among them: the kit is."""
    import subprocess
    import sys

    from tests.conftest import REPO, stage_copies

    lib = "/usr/local/lib/testbed/"
    sources = stage_copies(REPO / "server-image/Dockerfile", tmp_path, under=lib)
    assert sources, "no COPY into /usr/local/lib/testbed/ in server-image/Dockerfile"
    assert not any(s.startswith(("node-image/", "common/testbed_common")) for s in sources)
    tmp_path = tmp_path / lib.strip("/")
    # -S: no site-packages (the checkout's editable install); -E: no PYTHONPATH.
    proc = subprocess.run([sys.executable, "-S", "-E", str(tmp_path / "capture_service.py"),
                           "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "--max-captures" in proc.stdout
