"""The compose fleet's three descriptions of each node agree: deploy/fleet/nodes.yaml
(what scripts/up provisions), the node's agent config beside it, and its service in
docker-compose.yml (container, token, agent config, links, addresses). A node added to
one and not the others would start with no token or the wrong config, and be found
only by the end-to-end tests."""

from __future__ import annotations

import ipaddress
import subprocess
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

NODES = yaml.safe_load((REPO / "deploy/fleet/nodes.yaml").read_text())["nodes"]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())


def _links(service: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """TESTBED_LINKS of a node service: interface -> (subnet, profile path)."""
    out = {}
    for item in service["environment"]["TESTBED_LINKS"].split():
        name, subnet, profile = item.split("=")
        out[name] = (subnet, profile)
    return out


@pytest.mark.parametrize("node", [n["id"] for n in NODES])
def test_each_provisioned_node_has_its_service_and_agent_config(node: str) -> None:
    service = COMPOSE["services"][f"node-{node}"]
    assert service["container_name"] == f"testbed-node-{node}"
    env = service["environment"]
    assert env["TESTBED_NODE_TOKEN"] == f"${{NODE_TOKEN_{node.upper().replace('-', '_')}:-}}"
    assert f"./deploy/fleet/{node}.yaml:/etc/testbed/agent.yaml:ro" in service["volumes"]
    assert f"node-{node}-state:/var/lib/testbed-agent" in service["volumes"]
    assert f"node-{node}-state" in COMPOSE["volumes"]

    agent = yaml.safe_load((REPO / "deploy/fleet" / f"{node}.yaml").read_text())
    assert agent["node_id"] == node
    assert agent["netns_container"] == service["container_name"]
    links = _links(service)
    assert sorted(links) == sorted(i["name"] for i in agent["interfaces"])
    for iface in agent["interfaces"]:
        subnet, profile = links[iface["name"]]
        net = ipaddress.ip_network(subnet)
        # the SIM's server is on that operator's network, and the node is attached to it
        assert ipaddress.ip_address(iface["server_address"]) in net, iface
        attached = [n for n, a in service["networks"].items()
                    if ipaddress.ip_address(a["ipv4_address"]) in net]
        assert attached, (node, subnet, service["networks"])
        # the profile names the SIM's operator
        spec = yaml.safe_load((REPO / "deploy/profiles" / profile.split("/")[-1]).read_text())
        assert spec["operator"]["mcc_mnc"] == iface["operator"]["mcc_mnc"], (node, profile)
        if "diurnal" in spec:  # the compressed clock comes from scripts/up's anchor
            assert env["TESTBED_DIURNAL_ANCHOR"] == "${TESTBED_DIURNAL_ANCHOR:-}", node


#: The node the warm start's first run goes to (bench/cold_start.sh): started first.
FIRST_NODE = "se-02"


def test_the_first_node_starts_with_the_control_plane_and_every_other_after_it() -> None:
    """On two cores the warm start's first result waits for its node's start; seven
    nodes starting at once in the engine's own order made it three times slower, and
    all seven beside the first replica slowed that too, and the front started after two
    or three of the six registered se-02 a second later (bench/RESULTS.md). A node added
    with the plain node settings would start beside se-02 again."""
    services = COMPOSE["services"]
    assert services[f"node-{FIRST_NODE}"].get("depends_on") in (None, {}, [])
    for node in (n["id"] for n in NODES if n["id"] != FIRST_NODE):
        assert services[f"node-{node}"]["depends_on"] == {
            "orchestrator-1": {"condition": "service_healthy"},
            f"node-{FIRST_NODE}": {"condition": "service_started"},
            "front": {"condition": "service_started"},
        }, node


def test_no_two_containers_share_an_address() -> None:
    seen: dict[str, str] = {}
    for name, service in COMPOSE["services"].items():
        for network in (service.get("networks") or {}).values():
            address = (network or {}).get("ipv4_address")
            if address:
                assert address not in seen, (name, seen.get(address), address)
                seen[address] = name


def test_the_cca_compare_sim_is_on_a_moving_link_with_handovers() -> None:
    """tests/e2e/test_cca_compare.py counts on it: it-01's op2 hands over at least every
    10 s (so each of its 10 s bulk transfers spans one), dropping what is in flight, on a
    clock of its own, and its modem is sampled every second (placing each handover)."""
    _subnet, profile = _links(COMPOSE["services"]["node-it-01"])["op2"]
    spec = yaml.safe_load((REPO / "deploy/profiles" / profile.split("/")[-1]).read_text())
    assert spec["handover"]["every_s"] <= 10 and spec["handover"]["mode"] == "drop"
    assert "route" in spec and "diurnal" not in spec
    agent = yaml.safe_load((REPO / "deploy/fleet/it-01.yaml").read_text())
    assert agent["metadata_interval_s"] <= 1.0


def test_scripts_find_every_node_of_the_fleet_file_and_orchestrators_get_it() -> None:
    """scripts/up makes a token for each id that scripts/lib.sh reads from the fleet file
    (by sed: the host may have no YAML parser); a node it missed would have no token.
    The orchestrators get the same file and the tokens' hashes, never the tokens."""
    ids = subprocess.run(["bash", "-c", f". {REPO}/scripts/lib.sh && fleet_node_ids"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert ids == [n["id"] for n in NODES]
    for name in ("orchestrator-1", "orchestrator-2"):
        service = COMPOSE["services"][name]
        assert "./deploy/fleet/nodes.yaml:/etc/testbed/fleet.yaml:ro" in service["volumes"]
        env = service["environment"]
        assert env["TESTBED_FLEET__FILE"] == "/etc/testbed/fleet.yaml"
        assert env["TESTBED_FLEET__TOKEN_HASHES"] == "${NODE_TOKEN_HASHES:-}"
        assert not [v for v in env.values() if "NODE_TOKEN_" in str(v) and "HASHES" not in v]


def test_the_long_proxy_runs_override_puts_a_load_curve_on_every_sim_it_measures() -> None:
    """deploy/compose/proxy-long.yml (tests/e2e/test_proxy_long.py): each node's SIM
    that the long run measures gets a link with a daily load curve on the fleet's
    anchor, each override keeps the node's other SIMs (same interfaces, same operators),
    and scripts/lib.sh hands the file to compose when TESTBED_COMPOSE_OVERRIDE names it."""
    from tests.e2e.test_proxy_long import SIMS

    override = yaml.safe_load((REPO / "deploy/compose/proxy-long.yml").read_text())
    clocks = set()
    for node, interface in SIMS.items():
        name = f"node-{node}"
        service = {**COMPOSE["services"][name]}
        env = {**service["environment"], **override["services"].get(name, {}).get(
            "environment", {})}
        links = _links({"environment": env})
        assert sorted(links) == sorted(_links(service)), node
        agent = yaml.safe_load((REPO / "deploy/fleet" / f"{node}.yaml").read_text())
        for iface in agent["interfaces"]:
            profile = links[iface["name"]][1].split("/")[-1]
            spec = yaml.safe_load((REPO / "deploy/profiles" / profile).read_text())
            assert spec["operator"]["mcc_mnc"] == iface["operator"]["mcc_mnc"], (node, profile)
            if iface["name"] == interface:
                assert "diurnal" in spec, (node, profile)
                assert env["TESTBED_DIURNAL_ANCHOR"] == "${TESTBED_DIURNAL_ANCHOR:-}", node
                clocks.add(spec["diurnal"]["compression"])
    # Several clocks: full sessions every 600 s meet different hours on most links.
    assert len(clocks) >= 3, clocks
    got = subprocess.run(
        ["bash", "-c", f". {REPO}/scripts/lib.sh && docker() {{ return 1; }} && "
         "docker-compose() { echo \"$@\"; } && compose config"],
        env={"PATH": "/usr/bin:/bin", "TESTBED_COMPOSE_OVERRIDE": "deploy/compose/proxy-long.yml"},
        capture_output=True, text=True, check=True).stdout
    assert f"-f {REPO}/docker-compose.yml -f {REPO}/deploy/compose/proxy-long.yml" in got


def test_the_stores_share_a_network_with_the_orchestrators_alone() -> None:
    """PostgreSQL and InfluxDB are on the internal stores network only, and only the
    orchestrator replicas join it (tests/e2e/test_stores_reachable.py checks the same on
    the running stack, from a node's namespace): a node, or a run in its namespace, shares
    no network with either store."""
    services = COMPOSE["services"]
    stores = {"postgres", "influxdb"}
    store_networks = {net for name in stores for net in services[name]["networks"]}
    assert store_networks == {"stores"}
    assert COMPOSE["networks"]["stores"].get("internal") is True
    joined = {name for name, s in services.items() if "stores" in (s.get("networks") or {})}
    assert joined == stores | {"orchestrator-1", "orchestrator-2"}
    # Neither store is published on the host.
    assert not any(services[name].get("ports") for name in stores)


def test_influxdbs_users_and_the_orchestrators_are_the_same_secrets() -> None:
    """The passwords InfluxDB's start gives its writer and reader are the ones the
    orchestrators sign in with, from the variables scripts/up generates; the
    administrator's reaches InfluxDB alone."""
    influx = COMPOSE["services"]["influxdb"]["environment"]
    up = (REPO / "scripts/up").read_text()
    for name in ("orchestrator-1", "orchestrator-2"):
        env = COMPOSE["services"][name]["environment"]
        for role, theirs in (("WRITER", "WRITE_USER"), ("READER", "READ_USER")):
            assert env[f"TESTBED_INFLUX__{role}__USERNAME"] == influx[f"INFLUXDB_{theirs}"]
            assert env[f"TESTBED_INFLUX__{role}__PASSWORD"] == \
                influx[f"INFLUXDB_{theirs}_PASSWORD"]
        assert not [v for v in env.values() if "INFLUXDB_ADMIN" in str(v)]
    for value in (influx["INFLUXDB_ADMIN_PASSWORD"], influx["INFLUXDB_WRITE_USER_PASSWORD"],
                  influx["INFLUXDB_READ_USER_PASSWORD"]):
        variable = value.removeprefix("${").split(":")[0]
        assert variable in up, f"scripts/up does not generate {variable}"
