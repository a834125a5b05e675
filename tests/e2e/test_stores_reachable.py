"""The stores answer the control plane only (docs/security.md; the issue "Every run
confined", done-means 2): from a node's network namespace, which every run on the node
joins (``--network container:...``), neither PostgreSQL nor InfluxDB can be connected
to, at any of their addresses or by name, while the orchestrator's container reaches
both at the same addresses (so the check can fail). And InfluxDB, from the
orchestrator's container, answers nothing without a credential, its reader cannot
write or drop, its writer writes."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.e2e.conftest import Fleet, env_secret, influx_request

pytestmark = pytest.mark.e2e

#: The stores' containers, their ports and their names on the stores' network.
STORES = {"testbed-postgres": ("postgres", 5432), "testbed-influxdb": ("influxdb", 8086)}
NODE = "testbed-node-se-01"
ORCHESTRATOR = "testbed-orchestrator"
#: How long a connection attempt may take, seconds: a dropped SYN is seen as a timeout.
CONNECT_TIMEOUT_S = 3

CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("connected")
except OSError as e:
    print(type(e).__name__, e)
"""


def networks(container: str) -> dict[str, str]:
    """The container's networks and its address on each."""
    out = subprocess.run(["docker", "inspect", "-f", "{{json .NetworkSettings.Networks}}",
                          container], capture_output=True, text=True, check=True).stdout
    return {name: net["IPAddress"] for name, net in json.loads(out).items()}


def connect(container: str, host: str, port: int) -> str:
    """"connected", or why a TCP connection from inside ``container`` failed."""
    return subprocess.run(
        ["docker", "exec", container, "python3", "-c", CONNECT, host, str(port),
         str(CONNECT_TIMEOUT_S)], capture_output=True, text=True, check=True).stdout.strip()


def test_no_store_can_be_reached_from_a_nodes_namespace(fleet: Fleet) -> None:
    node_networks = set(networks(NODE))
    for store, (name, port) in STORES.items():
        addresses = networks(store)
        assert addresses, store
        # No network shared with the node: nothing of the store is on its wires.
        assert not node_networks & set(addresses), (store, addresses, node_networks)
        for address in addresses.values():
            assert connect(ORCHESTRATOR, address, port) == "connected", (store, address)
            refused = connect(NODE, address, port)
            assert refused != "connected", (f"{NODE} connects to {store} at "
                                            f"{address}:{port}")
        assert connect(ORCHESTRATOR, name, port) == "connected", store
        assert connect(NODE, name, port) != "connected", (f"{NODE} connects to {name}")


def test_influxdb_answers_nothing_without_a_credential(fleet: Fleet) -> None:
    reader = ("testbed_reader", env_secret("TESTBED_INFLUXDB_READER_PASSWORD"))
    writer = ("testbed_writer", env_secret("TESTBED_INFLUXDB_WRITER_PASSWORD"))
    db = {"db": "testbed"}
    point = "e2e_auth_probe,probe=1 value=1"

    # Nobody: no query, no write.
    status, body = influx_request("/query", {"q": "SHOW DATABASES"}, user=None)
    assert status == 401, body
    assert influx_request("/write", db, user=None, body=point)[0] == 401
    # A wrong password: refused alike.
    assert influx_request("/query", {**db, "q": "SHOW MEASUREMENTS"},
                          user=("testbed_reader", "not-the-password"))[0] == 401

    # The reader reads, and may neither write nor drop.
    status, body = influx_request("/query", {"q": "SHOW DATABASES"}, user=reader)
    assert status == 200 and '["testbed"]' in body, body
    status, body = influx_request("/write", db, user=reader, body=point)
    assert status == 403, body
    status, body = influx_request("/query", {**db, "q": "DROP SERIES FROM tat"},
                                  user=reader, body="")
    assert status == 403 and "requires WRITE" in body, body
    status, body = influx_request("/query", {"q": "DROP DATABASE testbed"}, user=reader,
                                  body="")
    assert status == 403 and "admin" in body, body

    # The writer writes (what ingest does), and cannot read back.
    assert influx_request("/write", db, user=writer, body=point)[0] == 204
    status, body = influx_request("/query", {**db, "q": "SELECT * FROM e2e_auth_probe"},
                                  user=writer)
    assert status == 403 and "requires READ" in body, body
    status, body = influx_request("/query", {**db, "q": "SELECT value FROM e2e_auth_probe"},
                                  user=reader)
    assert status == 200 and '"value"' in body, body
    status, body = influx_request("/query", {**db, "q": "DROP SERIES FROM e2e_auth_probe"},
                                  user=writer, body="")
    assert status == 200, body
