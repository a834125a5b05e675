"""The inventory format's checks (deploy/ansible/validate.yml, which site, upgrade and
remove run first): a bad inventory is refused before any host is touched, with every
problem and what to write instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.playbooks import ANSIBLE_DIR, play

EXAMPLE = ANSIBLE_DIR / "inventory" / "example.yml"


def _inventory(tmp_path: Path, **host: Any) -> Path:
    """The example inventory with se-01's entry changed (None deletes a key)."""
    inv = yaml.safe_load(EXAMPLE.read_text())
    entry = inv["all"]["children"]["testbed_nodes"]["hosts"]["se-01"]
    for key, value in host.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


def _modem(**changes: Any) -> dict[str, Any]:
    modem: dict[str, Any] = {
        "interface": "wwan0", "operator": {"mcc_mnc": "240-01", "name": "Telia"},
        "server_address": "198.51.100.10", "data_cap_bytes": 10**10,
    }
    modem.update(changes)
    return {k: v for k, v in modem.items() if v is not None}


def test_the_example_inventory_passes() -> None:
    played = play("validate.yml", EXAMPLE, env={"TESTBED_ADMIN_TOKEN": "t"})
    assert played.returncode == 0, played.output
    assert set(played.recap) == {"se-01", "no-01", "fi-01"}  # 2, 1 and 3 modems
    assert all(counts[3] == 0 for counts in played.recap.values())


@pytest.mark.parametrize(("host", "says"), [
    ({"testbed_country": False}, "quote NO"),  # what a bare NO becomes in YAML
    ({"testbed_country": None}, "testbed_country is missing"),
    ({"testbed_tags": "urban"}, "testbed_tags: a list of tags"),
    ({"testbed_mobility": "flying"}, "stationary or mobile"),
    ({"testbed_modems": []}, "testbed_modems is missing or empty"),
    ({"testbed_modems": [_modem(interface=f"wwan{i}") for i in range(4)]}, "a node has 1 to 3"),
    ({"testbed_modems": [_modem(), _modem()]}, "interface names repeat"),
    ({"testbed_modems": [_modem(operator={"mcc_mnc": 24001, "name": "Telia"})]},
     "MCC-MNC quoted"),
    ({"testbed_modems": [_modem(data_cap_bytes="20GB")]}, "monthly data cap in bytes"),
    ({"testbed_modems": [_modem(reset_day=32)]}, "1 to 31"),
    ({"testbed_modems": [_modem(server_address=None)]}, "server_address: the measurement server"),
    ({"testbed_modems": [_modem(colour="red")]}, "unknown keys colour"),
    ({"testbed_modems": [_modem(modem=7455)]}, ".modem: the modem's model as text"),
    ({"testbed_gps_device": "ttyACM0"}, "the receiver's device"),
    ({"testbed_node_id": "SE_01"}, "lower-case letters, digits and dashes"),
    ({"testbed_node_id": "no-01"}, "More than one host has the node id no-01"),
])
def test_a_bad_inventory_is_refused_with_what_to_fix(tmp_path: Path, host: dict[str, Any],
                                                      says: str) -> None:
    played = play("validate.yml", _inventory(tmp_path, **host),
                  env={"TESTBED_ADMIN_TOKEN": "t"})
    assert played.returncode != 0, played.output
    assert says in played.output


def test_a_missing_admin_token_is_refused(tmp_path: Path) -> None:
    played = play("validate.yml", EXAMPLE, env={"TESTBED_ADMIN_TOKEN": ""})
    assert played.returncode != 0
    assert "testbed_admin_token" in played.output
