"""A run's network: the plan, the holder's script, the node's nftables table and the
configuration switch (pure; the real namespaces are tests/integration/test_run_network.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node_agent.config import parse_config
from node_agent.errors import ConfigError, RunnerError
from node_agent.runnet import (
    HOLDER_MARK,
    ConfinedNetwork,
    SharedNetwork,
    SimPath,
    SimRoute,
    holder_argv_matches,
    holder_script,
    nft_script,
    parse_route,
    plan_links,
    table_name,
)

SIMS = ["op0", "op1", "op2"]


def test_each_sim_has_its_own_slash_30_and_veth_named_by_its_place() -> None:
    links = plan_links(["op2", "op0"], SIMS)
    assert [(lk.name, lk.peer, lk.run_address, lk.node_address, lk.table) for lk in links] == [
        ("op2", "tbrun2", "198.18.2.2", "198.18.2.1", 7102),
        ("op0", "tbrun0", "198.18.0.2", "198.18.0.1", 7100),
    ]
    assert links[0].run_mac != links[0].node_mac


@pytest.mark.parametrize(("booked", "why"), [
    ([], "at least one"), (["op0", "op0"], "booked twice"),
    (["wwan9"], "wwan9 is not configured on this node (op0, op1, op2)"),
])
def test_a_booking_the_node_cannot_carry_is_refused_by_name(booked: list[str],
                                                          why: str) -> None:
    with pytest.raises(RunnerError, match=why.replace("(", r"\(").replace(")", r"\)")):
        plan_links(booked, SIMS)


def test_the_holder_configures_routes_before_addresses_and_holds() -> None:
    script = holder_script(plan_links(["op0", "op1"], SIMS)).splitlines()
    # the first booked interface carries the default route, each its own by source
    assert "ip route replace default via 198.18.0.1 dev op0 onlink metric 100" in script
    assert "ip route replace default via 198.18.1.1 dev op1 onlink metric 101" in script
    assert "ip rule add pref 7101 from 198.18.1.2 lookup 7101" in script
    # each address comes after its routes: an answering address means a ready namespace
    for name, addr in (("op0", "198.18.0.2"), ("op1", "198.18.1.2")):
        assert script.index(f"ip addr add {addr}/30 dev {name}") > max(
            i for i, line in enumerate(script) if f"dev {name}" in line and "route" in line)
    assert script[-1].startswith("while :")


def test_the_holder_is_known_by_its_command_line() -> None:
    net = ConfinedNetwork([SimRoute("op0", "172.30.1.10")], pid_container="node-1")
    needs = net.holder_needs("r-1", ["op0"])
    assert (needs.network_mode, needs.cap_add, needs.pid_mode) == (
        "none", ("NET_ADMIN",), "container:node-1")
    assert needs.command is not None
    cmdline = b"\0".join(part.encode() for part in needs.command) + b"\0"
    assert holder_argv_matches(cmdline, "r-1")
    assert not holder_argv_matches(cmdline, "r-2")
    assert not holder_argv_matches(b"sleep\0infinity\0", "r-1")
    assert needs.command[3] == HOLDER_MARK


def test_the_node_table_confines_each_link() -> None:
    links = plan_links(["op0"], SIMS)
    script = nft_script("r-1", links, {"op0": SimPath("lkup0", None, "172.30.1.21")},
                        allowed={"op0": ("172.30.1.10",)}, denied=["172.30.0.0/16"],
                        metadata_port=8765).splitlines()
    t = table_name("r-1")
    rule = f"add rule inet {t} "
    assert f"{rule}run_pre iifname \"tbrun0\" ip saddr != 198.18.0.2 drop" in script
    assert f"{rule}run_pre iifname \"tbrun0\" meta nfproto != ipv4 drop" in script
    assert f"{rule}run_forward iifname \"tbrun0\" oifname != \"lkup0\" drop" in script
    forward = [line for line in script if "run_forward" in line and "rule" in line]
    # the server is accepted before the denied ranges are dropped, link-local always
    assert forward.index(f"{rule}run_forward iifname \"tbrun0\" ip daddr {{ 172.30.1.10 }} "
                         "accept") < forward.index(
        f"{rule}run_forward iifname \"tbrun0\" ip daddr {{ 169.254.0.0/16, 172.30.0.0/16 }} "
        "drop")
    assert f"{rule}run_forward oifname \"tbrun0\" ct state established,related accept" \
        in script
    assert f"{rule}run_input iifname \"tbrun0\" ip daddr 198.18.0.1 tcp dport 8765 accept" \
        in script
    assert script.index(f"{rule}run_input iifname \"tbrun0\" drop") > script.index(
        f"{rule}run_input iifname \"tbrun0\" ip daddr 198.18.0.1 tcp dport 8765 accept")
    assert f"{rule}run_nat oifname \"lkup0\" ip saddr 198.18.0.2 snat ip to 172.30.1.21" \
        in script


def test_routes_are_read_from_ip_json() -> None:
    assert parse_route('[{"dst":"172.30.1.10","dev":"lkup0","prefsrc":"172.30.1.21",'
                       '"table":"200","flags":[],"uid":0,"cache":[]}]') == ("lkup0", None)
    assert parse_route('[{"dst":"8.8.8.8","gateway":"10.64.0.1","dev":"wwan0"}]') \
        == ("wwan0", "10.64.0.1")
    with pytest.raises(RunnerError, match="unreadable route"):
        parse_route("RTNETLINK answers: Network is unreachable")


def test_a_denied_destination_that_is_no_network_is_refused() -> None:
    with pytest.raises(RunnerError, match="not an address or a network"):
        ConfinedNetwork([SimRoute("op0", "172.30.1.10")], denied=["the control network"])


def test_shared_is_todays_namespace() -> None:
    shared = SharedNetwork(netns_container="node-1", address_of={"op0": "172.30.1.21"}.get,
                           metadata_url="http://127.0.0.1:8765")
    assert shared.holder_needs("r", ["op0"]).network_mode == "container:node-1"
    view = shared.attach("r", holder_pid=1, sandbox_key=None, booked=["op0"])
    assert view.addresses == {"op0": "172.30.1.21"}
    assert view.metadata_url == "http://127.0.0.1:8765"


def test_a_missing_namespace_says_how_to_give_one(tmp_path: Path) -> None:
    net = ConfinedNetwork([SimRoute("op0", "172.30.1.10")], proc=tmp_path, ready_timeout_s=0.1)
    with pytest.raises(RunnerError, match="pid_mode container"):
        net.attach("r-1", holder_pid=4242, sandbox_key=None, booked=["op0"])


RAW = {"node_id": "n", "orchestrator_url": "http://o", "netns_container": "c",
       "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "T"},
                       "server_address": "172.30.1.10"}]}


def test_runs_share_the_node_namespace_unless_configured() -> None:
    config = parse_config(RAW, {"TESTBED_NODE_TOKEN": "t"})
    assert config.run_network.mode == "shared"
    confined = parse_config({**RAW, "run_network": {"mode": "confined",
                                                    "denied": ["172.30.0.0/16"]}},
                            {"TESTBED_NODE_TOKEN": "t"})
    assert confined.run_network.denied == ("172.30.0.0/16",)


def test_confined_runs_need_the_agent_in_the_node_namespace() -> None:
    with pytest.raises(ConfigError, match="counters_from: sysfs"):
        parse_config({**RAW, "counters_from": "netns_container",
                      "run_network": {"mode": "confined"}}, {"TESTBED_NODE_TOKEN": "t"})
