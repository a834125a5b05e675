"""scripts/demo-submit.py's campaigns: the demo on each newly online group of nodes, a
node restricted to some SIMs (it-01's study links left out by scripts/up) in a
campaign of its own, since a campaign selects its SIMs once for all its nodes."""

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from orchestrator.scheduling.spec import parse_campaign

SCRIPT = Path(__file__).resolve().parents[2] / "scripts/demo-submit.py"
SPEC = {"name": "demo", "project": "default", "repetitions": 1,
        "steps": [{"experiment": "tat", "parameters": {"duration_s": 10}},
                  {"experiment": "abw-tat", "parameters": {"run_s": 10}}]}


@pytest.fixture(scope="module")
def demo_submit() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_submit", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_unrestricted_nodes_share_one_campaign_on_every_sim(demo_submit: ModuleType) -> None:
    out = demo_submit.bodies(SPEC, ["se-01", "se-02"], {})
    assert [nodes for nodes, _ in out] == [["se-01", "se-02"]]
    body = out[0][1]
    assert [s["nodes"] for s in body["steps"]] == [["se-01", "se-02"]] * 2
    assert all("interfaces" not in s for s in body["steps"])


def test_a_restricted_node_gets_its_own_campaign_on_its_sims(demo_submit: ModuleType) -> None:
    out = demo_submit.bodies(SPEC, ["it-01", "se-02"], {"it-01": ["op0", "op1"]})
    assert [nodes for nodes, _ in out] == [["se-02"], ["it-01"]]
    it01 = out[1][1]
    assert [(s["experiment"], s["nodes"], s["interfaces"]) for s in it01["steps"]] == [
        ("tat", ["it-01"], ["op0", "op1"]), ("abw-tat", ["it-01"], ["op0", "op1"])]
    for _, body in out:  # each is a valid version-1 campaign (one set of nodes and SIMs)
        parse_campaign(body)


def test_only_restricted_nodes_online_submits_no_empty_campaign(demo_submit: ModuleType) -> None:
    out = demo_submit.bodies(SPEC, ["it-01"], {"it-01": ["op0"]})
    assert [nodes for nodes, _ in out] == [["it-01"]]
