"""The agent's half of the server's capture: what it asks (pure), and how it stops,
fetches, checks and records the file against a stand-in service (httpx.MockTransport),
so no server or tcpdump is needed. A server capture that fails never fails the run."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from node_agent.config import CaptureConfig, parse_config
from node_agent.errors import ConfigError
from node_agent.server_capture import (
    STOP_MARGIN_S,
    ServerCapture,
    capture_limit_s,
    server_capture_member,
    start_body,
)
from node_agent.sidecars import ServerSideCapture
from node_agent.spec import build_spec
from testbed_common.wire import Assignment
from tests.conftest import REPO

PCAP = b"\xd4\xc3\xb2\xa1" + b"\x00" * 20 + b"packets"
URL = "http://172.30.0.10:9010"


class FakeService:
    """The capture service's replies, and the requests it got."""

    def __init__(self, *, data: bytes = PCAP, start_status: int = 201,
                 claimed_sha256: str | None = None) -> None:
        self.data = data
        self.start_status = start_status
        self.claimed = claimed_sha256 or hashlib.sha256(data).hexdigest()
        self.calls: list[tuple[str, str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.calls.append((request.method, request.url.path, body))
        path = request.url.path
        if request.method == "POST" and path == "/captures":
            if self.start_status != 201:
                return httpx.Response(self.start_status, json={"error": "3 captures are "
                                                               "running; retry shortly"})
            return httpx.Response(201, json={"id": "c1", "running": True})
        if request.method == "POST" and path == "/captures/c1/stop":
            return httpx.Response(200, json={"id": "c1", "running": False,
                                             "bytes": len(self.data), "sha256": self.claimed,
                                             "stats": {"packets_captured": 3}})
        if request.method == "GET" and path == "/captures/c1/pcap":
            return httpx.Response(200, content=self.data)
        if request.method == "DELETE" and path == "/captures/c1":
            return httpx.Response(204)
        return httpx.Response(404, json={"error": "no such capture"})


def _capture(service: FakeService | None = None, *, address: str | None = "172.30.1.21",
             transport: httpx.BaseTransport | None = None) -> ServerCapture:
    return ServerCapture(URL, interface="op0", address=address, snaplen=96,
                         max_bytes=10**6, max_s=120.0, label="r-1",
                         transport=transport or httpx.MockTransport(service or FakeService()))


def test_what_the_agent_asks() -> None:
    assert server_capture_member("op0") == "server/capture/op0.pcap"
    assert server_capture_member("wwan 0") == "server/capture/wwan_0.pcap"
    assert start_body(address="172.30.1.21", snaplen=96, max_bytes=5, max_s=61.23456,
                      label="r" * 200) == {"address": "172.30.1.21", "snaplen": 96,
                                           "max_bytes": 5, "max_s": 61.235,
                                           "label": "r" * 120}
    now = datetime(2026, 11, 24, 2, 0, tzinfo=UTC)
    assert capture_limit_s(now + timedelta(seconds=300), now) == 300 + STOP_MARGIN_S
    assert capture_limit_s(now - timedelta(seconds=5), now) == 1 + STOP_MARGIN_S


def test_start_stop_fetch_delete(tmp_path: Path) -> None:
    service = FakeService()
    cap = _capture(service)
    assert cap.start()
    cap.stop()
    doc = cap.fetch(tmp_path)
    assert (tmp_path / "server/capture/op0.pcap").read_bytes() == PCAP
    assert doc["error"] is None and doc["file"] == "server/capture/op0.pcap"
    assert doc["bytes"] == len(PCAP) and doc["sha256"] == hashlib.sha256(PCAP).hexdigest()
    assert doc["server"]["stats"] == {"packets_captured": 3}
    assert [(m, p) for m, p, _ in service.calls] == [
        ("POST", "/captures"), ("POST", "/captures/c1/stop"), ("GET", "/captures/c1/pcap"),
        ("DELETE", "/captures/c1")]
    assert service.calls[0][2] == {"address": "172.30.1.21", "snaplen": 96,
                                   "max_bytes": 10**6, "max_s": 120.0, "label": "r-1"}


def test_a_file_that_does_not_match_the_servers_checksum_is_dropped(tmp_path: Path) -> None:
    service = FakeService(claimed_sha256="0" * 64)
    cap = _capture(service)
    assert cap.start()
    doc = cap.fetch(tmp_path)  # stops first
    assert doc["file"] is None and "the server has" in doc["error"]
    assert not (tmp_path / "server/capture/op0.pcap").exists()
    assert ("DELETE", "/captures/c1", None) not in service.calls  # left to its expiry


def test_a_refusal_is_recorded_with_the_servers_reason(tmp_path: Path) -> None:
    cap = _capture(FakeService(start_status=503))
    assert not cap.start()
    doc = cap.fetch(tmp_path)
    assert doc["error"] == ("the server's capture service refused: HTTP 503: 3 captures are "
                            "running; retry shortly")
    assert doc["file"] is None and doc["enabled"]


def test_an_unreachable_service(tmp_path: Path) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    cap = _capture(transport=httpx.MockTransport(down))
    assert not cap.start()
    assert cap.fetch(tmp_path)["error"].startswith(
        f"cannot reach the server's capture service at {URL}")


def test_no_address_no_capture(tmp_path: Path) -> None:
    service = FakeService()
    cap = _capture(service, address=None)
    assert not cap.start() and "has no address" in (cap.error or "")
    cap.fetch(tmp_path)
    assert service.calls == []


def test_a_run_that_never_started_its_container(tmp_path: Path) -> None:
    service = FakeService()
    doc = _capture(service).fetch(tmp_path)
    assert doc["error"] == "not started: the run ended before its container started"
    assert service.calls == []


class Spec:
    run_id, interface, interface_address = "r-1", "op0", "172.30.1.21"
    server_capture_url: str | None = URL
    deadline = datetime.now(UTC) + timedelta(seconds=60)


def _sidecar(capture: CaptureConfig, service: FakeService,
             spec: Spec | None = None) -> ServerSideCapture:
    return ServerSideCapture.for_run(
        spec or Spec(), config=capture, now=datetime.now(UTC),  # type: ignore[arg-type]
        transport=httpx.MockTransport(service))


def test_the_runner_records_the_servers_capture(tmp_path: Path) -> None:
    sidecar = _sidecar(CaptureConfig(snaplen=128), FakeService())
    server = sidecar.server
    assert server is not None and server.body is not None
    assert server.body["snaplen"] == 128 and 60 < server.body["max_s"] <= 60 + STOP_MARGIN_S
    sidecar.prestart()
    assert server.id is not None and server.error is None
    sidecar.exited()
    sidecar.finish(tmp_path)
    doc = json.loads((tmp_path / "meta/server-capture.json").read_text())
    assert doc["file"] == "server/capture/op0.pcap" and doc["error"] is None
    assert not (tmp_path / "logs/agent.txt").exists()


def test_the_runner_notes_a_failure_and_goes_on(tmp_path: Path) -> None:
    sidecar = _sidecar(CaptureConfig(), FakeService(start_status=507))
    sidecar.prestart()
    assert sidecar.server is not None and sidecar.server.id is None
    sidecar.exited()
    sidecar.finish(tmp_path)
    doc = json.loads((tmp_path / "meta/server-capture.json").read_text())
    assert doc["enabled"] and "HTTP 507" in doc["error"]
    assert "server packet capture: the server's capture service refused" in (
        tmp_path / "logs/agent.txt").read_text()


def test_a_service_that_raises_is_noted_and_the_run_goes_on(tmp_path: Path) -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("the transport broke")

    sidecar = ServerSideCapture.for_run(
        Spec(), config=CaptureConfig(), now=datetime.now(UTC),  # type: ignore[arg-type]
        transport=httpx.MockTransport(broken))
    sidecar.prestart()
    sidecar.exited()
    sidecar.finish(tmp_path)
    doc = json.loads((tmp_path / "meta/server-capture.json").read_text())
    assert doc["enabled"] and doc["error"] == "RuntimeError: the transport broke"


@pytest.mark.parametrize(("capture", "url", "why"), [
    (CaptureConfig(enabled=False), URL, "packet capture is off (capture.enabled)"),
    (CaptureConfig(), None, "no server_capture_url for interface op0"),
])
def test_without_a_server_capture_the_meta_says_why(
    tmp_path: Path, capture: CaptureConfig, url: str | None, why: str
) -> None:
    spec = Spec()
    spec.server_capture_url = url
    sidecar = _sidecar(capture, FakeService(), spec)
    assert sidecar.server is None
    sidecar.prestart()
    sidecar.exited()
    sidecar.finish(tmp_path)
    doc = json.loads((tmp_path / "meta/server-capture.json").read_text())
    assert doc == {"format": "testbed.server-capture", "version": 1, "enabled": False,
                   "interface": "op0", "file": None, "reason": why}


def _config(**iface: Any) -> Any:
    return parse_config(
        {"node_id": "se-01", "orchestrator_url": "http://o:8080", "netns_container": "n",
         "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
                         "server_address": "172.30.1.10", **iface}]},
        {"TESTBED_NODE_TOKEN": "t"})


def test_the_url_is_per_interface_and_reaches_the_spec() -> None:
    a = Assignment(run_id="r-1", experiment="tat", image="i", parameters={},
                   interface="op0", not_before=datetime(2026, 11, 24, tzinfo=UTC),
                   deadline=datetime(2026, 11, 24, 0, 5, tzinfo=UTC), max_bytes=1)
    spec = build_spec(a, _config(server_capture_url=URL), interface_address="172.30.1.21")
    assert spec.server_capture_url == URL
    assert "server_capture_url" not in json.dumps(spec.config_json())  # not the experiment's
    assert build_spec(a, _config(), interface_address=None).server_capture_url is None
    with pytest.raises(ConfigError, match="server_capture_url"):
        _config(server_capture_url="172.30.0.10:9010")


@pytest.mark.parametrize("node", [n["id"] for n in yaml.safe_load(
    (REPO / "deploy/fleet/nodes.yaml").read_text())["nodes"]])
def test_the_fleet_fetches_over_the_control_network(node: str) -> None:
    """The compose fleet's server is 172.30.0.10 on the control network and
    172.30.{1,2,3,4}.10 on the operators' (docker-compose.yml)."""
    raw = yaml.safe_load((REPO / "deploy/fleet" / f"{node}.yaml").read_text())
    config = parse_config(raw, {"TESTBED_NODE_TOKEN": "t"})
    for iface in config.interfaces:
        assert iface.server_capture_url == "http://172.30.0.10:9010"
        assert not iface.server_address.startswith("172.30.0.")
