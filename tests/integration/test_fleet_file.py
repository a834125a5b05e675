"""The fleet file at start: the compose stack's nodes exist before the API serves, with
the tokens `scripts/up` made for them beforehand, so agents started beside the control
plane register at its first answer (services.fleetfile)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from orchestrator.api.app import create_app
from orchestrator.settings import FleetSettings
from testbed_common import wire
from tests.conftest import REPO, ManualClock
from tests.integration import live
from tests.integration.conftest import ADMIN, Api, make_settings

FLEET = REPO / "deploy" / "fleet" / "nodes.yaml"


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@contextmanager
def _started(tmp: Path, clock: ManualClock, database_url: str,
             hashes: str) -> Iterator[TestClient]:
    settings = make_settings(tmp).model_copy(update={
        "database_url": database_url,
        "fleet": FleetSettings(file=FLEET, token_hashes=hashes)})
    app = create_app(settings, clock=clock, reaper=False)
    with TestClient(app) as client:
        yield client
    app.state.ctx.db.engine.dispose()


def _register(client: TestClient, token: str) -> int:
    reg = wire.Registration(agent_version="test", interfaces=[wire.InterfaceReport(
        name="op0", operator=wire.Operator(mcc_mnc="240-01", name="Telia"))])
    return client.post(f"{wire.AGENT_PREFIX}/register", headers=Api.node(token),
                       json=reg.model_dump(mode="json")).status_code


def test_the_fleet_files_nodes_register_with_their_tokens_at_the_first_answer(
    tmp_path: Path, clock: ManualClock, database_url: str
) -> None:
    tokens = {"se-01": "a" * 20 + "-se01-token", "se-02": "b" * 20 + "-se02-token"}
    hashes = ", ".join(f"{n}={_sha(t)}" for n, t in tokens.items())
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with _started(tmp_path, clock, database_url, hashes) as client:
        nodes = {n["id"]: n for n in client.get("/api/v1/nodes", headers=admin).json()}
        # only the nodes with a hash; their facts from the file
        assert set(nodes) == {"se-01", "se-02"}
        assert nodes["se-02"]["timezone"] == "Europe/Stockholm"
        assert nodes["se-02"]["tags"] == ["single-sim"]
        assert _register(client, tokens["se-02"]) == 200
        assert _register(client, tokens["se-01"]) == 200
        assert _register(client, "c" * 32) == 401  # no other token
        # a rotated token survives a restart: an existing node is left as it is
        r = client.post("/api/v1/nodes/se-02/rotate-token", headers=admin)
        assert r.status_code == 200, r.text
        rotated = r.json()["token"]
    with _started(tmp_path, clock, database_url, hashes) as client:
        assert _register(client, tokens["se-02"]) == 401
        assert _register(client, rotated) == 200


@pytest.mark.parametrize(("hashes", "why"), [
    ("se-01=abc", "not ID=<64 hex digits>"),
    (f"xx-99={'0' * 64}", "not in the fleet file"),
    (f"se-01={'0' * 64} se-01={'1' * 64}", "twice"),
])
def test_a_bad_token_hash_stops_the_start(
    tmp_path: Path, clock: ManualClock, database_url: str, hashes: str, why: str
) -> None:
    with pytest.raises(ValueError, match=why), _started(tmp_path, clock, database_url, hashes):
        pass


def test_the_served_orchestrator_says_what_it_made_and_how_long_its_start_took(
    tmp_path: Path
) -> None:
    """An operator reads `docker logs` of a replica: its INFO lines are there (before,
    Python dropped them: no handler), the fleet file's nodes it made, and the start's
    steps with their times."""
    hashes = f"se-02={_sha('d' * 20 + '-se02-token')}"
    with live.orchestrator(tmp_path, TESTBED_FLEET__FILE=str(FLEET),
                           TESTBED_FLEET__TOKEN_HASHES=hashes):
        pass
    said = (tmp_path / "orchestrator.log").read_text()
    assert re.search(r" INFO orchestrator: serving on 127\.0\.0\.1:\d+, 1 worker", said), said
    assert " INFO orchestrator.bootstrap: provisioned from the fleet file: se-02\n" in said, said
    assert re.search(r"context ready in [0-9.]+ s \((database [0-9.]+ s, )?schema [0-9.]+ s, "
                     r"catalogue [0-9.]+ s, administrator and fleet [0-9.]+ s\)", said), said
