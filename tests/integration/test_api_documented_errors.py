"""The OpenAPI document says what is sent: every error is ``{"detail": "..."}``
(ErrorBody), documented per route; and /metrics shows node ids only to a scraper with
the metrics token."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.api.app import create_app
from tests.conftest import ManualClock
from tests.integration.conftest import Api, make_settings

ERROR_REF = "#/components/schemas/ErrorBody"


def error_schema(op: dict[str, Any], status: str) -> str | None:
    content = op["responses"].get(status, {}).get("content", {})
    ref: str | None = content.get("application/json", {}).get("schema", {}).get("$ref")
    return ref


def test_every_route_documents_its_errors_as_sent(api: Api) -> None:
    doc = api.client.get("/openapi.json").json()
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    api_ops = [(path, method, op) for path, ops in doc["paths"].items()
               for method, op in ops.items() if path.startswith("/api/v1/")]
    assert len(api_ops) > 25
    for path, method, op in api_ops:
        for status in ("400", "401", "413", "422"):
            assert error_schema(op, status) == ERROR_REF, (method, path, status)
        assert op["security"] == [{"Token": []}], (method, path)
    # what a 401 and a 422 really look like
    r = api.client.get("/api/v1/nodes")
    assert r.status_code == 401 and set(r.json()) == {"detail"}
    r = api.client.get("/api/v1/nodes/NOT_AN_ID", headers=api.admin)
    assert r.status_code == 422 and set(r.json()) == {"detail"}


def metrics_app(tmp_path: Path, clock: ManualClock) -> TestClient:
    settings = make_settings(tmp_path).model_copy(
        update={"metrics_token": "scrape-token-0123456789"})
    return TestClient(create_app(settings, clock=clock, reaper=False))


def test_metrics_show_node_ids_only_with_the_scrape_token(tmp_path: Path,
                                                           clock: ManualClock) -> None:
    with metrics_app(tmp_path, clock) as client:
        api = Api(client, clock, make_settings(tmp_path))
        api.add_node("se-01", [("op0", "240-01", "Telia")])
        r = client.put("/api/v1/nodes/se-01/interfaces/op0/quota", headers=api.admin,
                       json={"cap_bytes": 10**9})
        assert r.status_code == 200, r.text
        public = client.get("/metrics").text
        assert 'testbed_nodes{health="online"} 1.0' in public
        assert "se-01" not in public and "testbed_quota_" not in public
        for token in ("scrape-token-0123456789", api.admin["Authorization"][7:]):
            full = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).text
            assert 'testbed_quota_limit_bytes{interface="op0",mcc_mnc="240-01",node="se-01"}' \
                in full
        r = client.get("/metrics", headers={"Authorization": "Bearer wrong-token-000000"})
        assert r.status_code == 401 and "TESTBED_METRICS_TOKEN" in r.json()["detail"]


@pytest.mark.parametrize("token", ["change-me", "short"])
def test_weak_metrics_token_refused_outside_development(tmp_path: Path, token: str) -> None:
    with pytest.raises(ValueError, match="TESTBED_METRICS_TOKEN"):
        make_settings(tmp_path).model_validate({
            **make_settings(tmp_path).model_dump(), "environment": "production",
            "admin_token": secrets.token_hex(32),  # a strong one: only the scrape token
            "metrics_token": token})
