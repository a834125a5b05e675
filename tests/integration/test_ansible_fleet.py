"""deploy/ansible against real SSH targets: two bare Debian hosts (containers of the
project's Debian base with only sshd, python3 and systemd: tests/fixtures/bare-node)
provisioned from nothing by site.yml, over SSH, against a real orchestrator process.

Containers rather than network namespaces: the playbook installs Debian packages and
runs services (Docker Engine, nftables) under systemd, which needs a root file system
and an init of its own; a container of the Debian base gives both, a namespace neither.
The hosts run their own Docker Engine (installed by the playbook from Debian's packages)
in which the agent and the experiments run, as on a real node.

Node ans-a has two modems (eth1 on operator 240-01, eth2 on 240-07), node ans-b one
(eth1, 242-01); each "modem" is a link to the measurement server shaped by tbf at both
ends (the node's uplink here, the server's downlink by TESTBED_SHAPE).
"""

from __future__ import annotations

import ast
import ipaddress
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jinja2
import pytest
import yaml

from tests.conftest import REPO, require, require_tools, story
from tests.e2e.chaos import docker, sh
from tests.integration import live
from tests.integration.playbooks import ANSIBLE_DIR, Played, play

TAG = "dev"
NODE_IMAGE = f"testbed/node:{TAG}"
SERVER_IMAGE = f"testbed/server:{TAG}"
TAT_IMAGE = "testbed/exp-tat:1"
FIXTURE_IMAGE = "testbed-test/bare-node:latest"
SUFFIX = uuid.uuid4().hex[:6]
PREFIX = f"tbans-{SUFFIX}"
ENV = {"TESTBED_ADMIN_TOKEN": live.ADMIN_TOKEN}
#: The inventory reads the admin token from the control host's environment, as documented.
ADMIN_LOOKUP = "{{ lookup('ansible.builtin.env', 'TESTBED_ADMIN_TOKEN') }}"

#: The inventory's nodes: id -> (networks after the control one, its modems).
MODEMS: dict[str, list[dict[str, Any]]] = {
    "ans-a": [
        {"interface": "eth1", "operator": {"mcc_mnc": "240-01", "name": "Telia"}, "rat": "LTE",
         "modem": "Sierra Wireless EM7455", "net": "opa", "data_cap_bytes": 5_000_000_000,
         "reset_day": 1},
        {"interface": "eth2", "operator": {"mcc_mnc": "240-07", "name": "Tele2"}, "rat": "LTE",
         "modem": "Quectel EC25", "net": "opb", "data_cap_bytes": 2_000_000_000,
         "reset_day": 15},
    ],
    "ans-b": [
        {"interface": "eth1", "operator": {"mcc_mnc": "242-01", "name": "Telenor"},
         "rat": "LTE", "modem": "Quectel EM12", "net": "opa", "data_cap_bytes": 3_000_000_000,
         "reset_day": 5},
    ],
}
RATES = {"opa": "10mbit", "opb": "4mbit"}
RATE_BPS = {("ans-a", "eth1"): 10e6, ("ans-a", "eth2"): 4e6, ("ans-b", "eth1"): 10e6}


@dataclass(frozen=True)
class Rig:
    live: live.Live
    inventory: Path
    containers: dict[str, str]  # node id -> container name
    api: httpx.Client
    first: Played


def _address(container: str, network: str) -> str:
    return docker("inspect", "-f",
                  f'{{{{(index .NetworkSettings.Networks "{network}").IPAddress}}}}',
                  container).strip()


def _host_view(rig: Rig, node: str) -> str:
    """What a failed run's host looked like: addresses, routes, the kernel quotas'
    rules and the agent's last lines (a CI run once saw a quota spent at 17 MB with
    475 kB on the interface, and nothing left to tell why)."""
    return docker("exec", rig.containers[node], "sh", "-c",
                  "{ ip -br addr; ip route; ip rule; nft list ruleset; "
                  "docker logs --tail 40 testbed-agent; } 2>&1", check=False)


def _wait_ssh(address: str, timeout_s: float = 60) -> None:
    end = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((address, 22), timeout=2) as s:
                if s.recv(4).startswith(b"SSH"):
                    return
        except OSError:
            pass
        assert time.monotonic() < end, f"no sshd on {address}:22 after {timeout_s}s"
        time.sleep(1)


#: The rig's variables that change what site.yml installs (set in its inventory too).
RIG_VARS = {
    # A container cannot set the clock (no CAP_SYS_TIME, on purpose: it is the
    # machine's clock); chrony would only report that.
    "testbed_chrony": False,
}


def _site_packages() -> list[str]:
    """The Debian packages site.yml's base and docker roles install on the rig's hosts:
    their apt tasks' names, rendered with the rig's variables over the roles' defaults.
    The bare host's image downloads them beforehand (tests/fixtures/bare-node), so the
    list is read from the roles, never copied."""
    defaults = yaml.safe_load((ANSIBLE_DIR / "roles/testbed_common/defaults/main.yml")
                              .read_text())
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    names: list[str] = []
    for role in ("base", "docker"):
        for task in yaml.safe_load((ANSIBLE_DIR / f"roles/{role}/tasks/main.yml").read_text()):
            apt = task.get("ansible.builtin.apt")
            if not apt:
                continue
            name = apt["name"]
            if isinstance(name, str) and "{{" in name:
                name = ast.literal_eval(env.from_string(name).render({**defaults, **RIG_VARS}))
            names += [name] if isinstance(name, str) else name
    assert "docker.io" in names, names  # the roles' apt tasks were found
    return names


def _require_images() -> None:
    """The images scripts/test builds before the tests (scripts/build-images.sh)."""
    missing = [i for i in (NODE_IMAGE, SERVER_IMAGE, TAT_IMAGE)
               if subprocess.run(["docker", "image", "inspect", i], capture_output=True,
                                 check=False).returncode != 0]
    require(not missing, f"needs the images {missing} (scripts/build-images.sh node server tat)")


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    require(shutil.which("docker") is not None, "needs Docker")
    require_tools("ssh", "ssh-keygen")
    tmp = tmp_path_factory.mktemp("ansible")
    _require_images()
    # The control host's side: image archives, as an operator exports them. docker save
    # and gzip take about 20 s, spent beside the hosts' start and the orchestrator's; the
    # archives are waited for before the first playbook.
    export = subprocess.Popen(
        [str(ANSIBLE_DIR / "export-images.sh"), "tat"], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
        env={"PATH": "/usr/bin:/bin", "OUT": str(tmp / "images"), "TAG": TAG})
    networks = {n: f"{PREFIX}-{n}" for n in ("ctl", "opa", "opb")}
    containers = {node: f"{PREFIX}-{node}" for node in MODEMS}
    server = f"{PREFIX}-server"
    try:
        docker("build", "-q", "-t", FIXTURE_IMAGE, "--build-arg",
               f"PACKAGES={' '.join(_site_packages())}",
               str(REPO / "tests" / "fixtures" / "bare-node"))
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "key")],
                       check=True)
        for name in networks.values():
            docker("network", "create", name)
        subnets = {n: docker("network", "inspect", "-f", "{{(index .IPAM.Config 0).Subnet}}",
                             name).strip() for n, name in networks.items()}
        gateway = docker("network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}",
                         networks["ctl"]).strip()
        shape = ",".join(f"{subnets[n]}={rate}" for n, rate in RATES.items())
        docker("create", "--name", server, "--cap-add", "NET_ADMIN", "--network", networks["opa"],
               "-e", f"TESTBED_SHAPE={shape}", SERVER_IMAGE)
        docker("network", "connect", networks["opb"], server)
        docker("start", server)
        for node, name in containers.items():
            # systemd as PID 1 (SYS_ADMIN, its own cgroup view, tmpfs /run), and a volume
            # for the host's Docker Engine (overlay2 needs a file system under it that is
            # not itself an overlay).
            docker("run", "-d", "--name", name, "--hostname", node,
                   "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--cap-add", "NET_RAW",
                   "--security-opt", "seccomp=unconfined", "--tmpfs", "/run",
                   "--tmpfs", "/run/lock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
                   "-v", "/var/lib/docker", "--network", networks["ctl"], FIXTURE_IMAGE)
            for modem in MODEMS[node]:
                docker("network", "connect", networks[modem["net"]], name)
            docker("cp", str(tmp / "key.pub"), f"{name}:/root/.ssh/authorized_keys")
            sh(name, "chown root:root /root/.ssh/authorized_keys && "
                     "chmod 600 /root/.ssh/authorized_keys")
        with live.orchestrator(
            tmp, TESTBED_HOST="0.0.0.0",
            TESTBED_HEALTH__HEARTBEAT_INTERVAL_S="2", TESTBED_HEALTH__REAP_INTERVAL_S="2",
            TESTBED_SCHEDULING__PADDING_S="2", TESTBED_SCHEDULING__REPLAN_INTERVAL_S="5",
        ) as orch:
            port = orch.url.rsplit(":", 1)[1]
            hosts = {}
            for node, name in containers.items():
                address = _address(name, networks["ctl"])
                _wait_ssh(address)
                hosts[node] = {
                    "ansible_host": address,
                    "testbed_country": "SE" if node == "ans-a" else "NO",
                    "testbed_timezone": "Europe/Stockholm" if node == "ans-a" else "Europe/Oslo",
                    "testbed_model": "apu2" if node == "ans-a" else "raspberry-pi-4",
                    "testbed_tags": ["dual-sim"] if node == "ans-a" else ["single-sim"],
                    "testbed_modems": [
                        {**{k: v for k, v in m.items() if k != "net"},
                         "server_address": _address(server, networks[m["net"]])}
                        for m in MODEMS[node]
                    ],
                }
            inventory = tmp / "fleet.yml"
            inventory.write_text(yaml.safe_dump({"all": {
                "vars": {
                    "testbed_api_url": orch.url,
                    "testbed_orchestrator_url": f"http://{gateway}:{port}",
                    "testbed_admin_token": ADMIN_LOOKUP,
                    "testbed_image_archives": str(tmp / "images"),
                    "testbed_heartbeat_interval_s": 2,
                    **RIG_VARS,
                    "ansible_user": "root",
                    "ansible_ssh_private_key_file": str(tmp / "key"),
                    # Fresh test hosts every run: their keys cannot be known beforehand.
                    "ansible_ssh_common_args": "-o StrictHostKeyChecking=no "
                                               "-o UserKnownHostsFile=/dev/null",
                },
                "children": {"testbed_nodes": {"hosts": hosts}},
            }}))
            exported = export.communicate(timeout=600)[0]
            assert export.returncode == 0, f"export-images.sh failed:\n{exported}"
            first = play("site.yml", inventory, env=ENV)
            assert first.returncode == 0, first.output[-6000:]
            # Each SIM's link: the node's uplink shaped as the server shapes the downlink.
            for node, name in containers.items():
                for m in MODEMS[node]:
                    sh(name, f"tc qdisc replace dev {m['interface']} root tbf "
                             f"rate {RATES[m['net']]} burst 32kbit latency 50ms")
                # Each "modem" is the interface the inventory names, on its network: checked,
                # since every figure below rests on it (Docker names a connected network's
                # interface ethN in order of connection).
                for modem in MODEMS[node]:
                    subnet = ipaddress.ip_network(subnets[modem["net"]])
                    shown = sh(name, f"ip -4 -o addr show dev {modem['interface']}").split()
                    addr = next((w.split("/")[0] for w in shown if "/" in w), "")
                    assert addr and ipaddress.ip_address(addr) in subnet, (
                        f"{node}'s {modem['interface']} is not on {modem['net']} ({subnet}): "
                        f"{sh(name, 'ip -br addr')}")
            with httpx.Client(base_url=orch.url, headers=orch.admin, timeout=30) as api:
                yield Rig(orch, inventory, containers, api, first)
    finally:
        if export.poll() is None:  # a failure before the first playbook
            export.kill()
            export.wait()
        for name in [*containers.values(), server]:
            docker("rm", "-f", "-v", name, check=False)
        for name in networks.values():
            docker("network", "rm", name, check=False)


def _wait_online(rig: Rig, node: str, timeout_s: float = 120) -> dict[str, Any]:
    end = time.monotonic() + timeout_s
    while True:
        body: dict[str, Any] = rig.api.get(f"/api/v1/nodes/{node}").json()
        if body["health"] == "online" and body["interfaces"]:
            return body
        if time.monotonic() > end:
            agent = subprocess.run(
                ["docker", "exec", rig.containers[node], "docker", "logs", "--tail", "40",
                 "testbed-agent"], capture_output=True, text=True, check=False)
            log = (rig.live.root / "orchestrator.log").read_text()[-3000:]
            raise AssertionError(f"node {node} not online after {timeout_s}s: {body}\n"
                                 f"agent:\n{agent.stdout}{agent.stderr}\norchestrator:\n{log}")
        time.sleep(1)


def test_a_second_run_changes_nothing(rig: Rig) -> None:
    assert set(rig.first.recap) == set(MODEMS)
    assert all(n > 0 for n in rig.first.changed().values())  # the first run did the work
    again = play("site.yml", rig.inventory, env=ENV)
    assert again.returncode == 0, again.output[-6000:]
    assert again.changed() == {node: 0 for node in MODEMS}, again.changed_tasks()


def test_a_dry_run_with_diff_works_and_changes_nothing(rig: Rig) -> None:
    dry = play("site.yml", rig.inventory, "--check", "--diff", env=ENV)
    assert dry.returncode == 0, dry.output[-6000:]
    assert dry.changed() == {node: 0 for node in MODEMS}, dry.changed_tasks()


def test_each_node_holds_its_token_alone(rig: Rig) -> None:
    for name in rig.containers.values():
        assert sh(name, "stat -c '%a %U' /etc/testbed/agent.env").strip() == "600 root"
        token = sh(name, "cat /etc/testbed/agent.env").strip().removeprefix("TESTBED_NODE_TOKEN=")
        assert len(token) >= 20
        # The config file that people read holds no token.
        assert token not in sh(name, "cat /etc/testbed/agent.yaml")


def test_both_nodes_register_with_their_modems_and_data_plans(rig: Rig) -> None:
    for node, modems in MODEMS.items():
        body = _wait_online(rig, node)
        assert body["country"] == ("SE" if node == "ans-a" else "NO")
        assert body["architecture"] == "amd64"
        seen = {i["name"]: i["mcc_mnc"] for i in body["interfaces"]}
        assert seen == {m["interface"]: m["operator"]["mcc_mnc"] for m in modems}
        for m in modems:
            quota = rig.api.get(f"/api/v1/nodes/{node}/interfaces/{m['interface']}/quota").json()
            assert (quota["source"], quota["limit"], quota["reset_day"]) == (
                "configured", m["data_cap_bytes"], m["reset_day"])


@pytest.mark.parametrize(("node", "interface"), [("ans-a", "eth2"), ("ans-b", "eth1")])
def test_each_node_measures_and_its_result_is_archived(rig: Rig, node: str,
                                                       interface: str) -> None:
    _wait_online(rig, node)
    r = rig.api.post("/api/v1/runs", json={"experiment": "tat", "node": node,
                                            "interface": interface,
                                            "parameters": {"duration_s": 5}})
    assert r.status_code == 201, r.text
    run_id = r.json()["id"]
    end = time.monotonic() + 240
    while True:
        run = rig.api.get(f"/api/v1/runs/{run_id}").json()
        if run["state"] in ("done", "failed", "cancelled", "expired"):
            break
        assert time.monotonic() < end, f"run {run_id} still {run['state']}:\n{story(run)}"
        time.sleep(1)
    assert run["state"] == "done", f"{story(run)}\n{_host_view(rig, node)}"
    assert run["bundle_sha256"]
    bundle = rig.api.get(f"/api/v1/runs/{run_id}/bundle")
    assert bundle.status_code == 200
    # The link's rate, measured through the node's own Docker Engine and interface.
    result = rig.api.get(f"/api/v1/runs/{run_id}/result").json()
    assert result["format"] == "testbed.tat"
    rate = RATE_BPS[node, interface]
    assert abs(result["mean_bps"] - rate) / rate < 0.15, result["mean_bps"]


def test_upgrade_replaces_the_agent_and_keeps_its_state(rig: Rig) -> None:
    name = rig.containers["ans-a"]
    before = sh(name, "docker inspect -f '{{.Id}}' testbed-agent").strip()
    sh(name, "echo kept > /var/lib/testbed-agent/spool/upgrade-marker")
    upgraded = play("upgrade.yml", rig.inventory, "--limit", "ans-a", env=ENV)
    assert upgraded.returncode == 0, upgraded.output[-6000:]
    assert sh(name, "docker inspect -f '{{.Id}}' testbed-agent").strip() != before
    assert sh(name, "cat /var/lib/testbed-agent/spool/upgrade-marker").strip() == "kept"
    sh(name, "rm /var/lib/testbed-agent/spool/upgrade-marker")
    body = _wait_online(rig, "ans-a")
    assert body["maintenance"] is False  # back in service after the upgrade


def test_remove_takes_the_node_off_and_keeps_its_data(rig: Rig) -> None:
    name = rig.containers["ans-b"]
    removed = play("remove.yml", rig.inventory, "--limit", "ans-b", env=ENV)
    assert removed.returncode == 0, removed.output[-6000:]
    assert "testbed-agent" not in sh(name, "docker ps -a --format '{{.Names}}'")
    assert sh(name, "docker images -q").strip() == ""
    assert rig.api.get("/api/v1/nodes/ans-b").json()["maintenance"] is True
    # Its data folder and token stay on the host.
    assert sh(name, "test -d /var/lib/testbed-agent/spool && test -f /etc/testbed/agent.env"
                    " && echo yes").strip() == "yes"
