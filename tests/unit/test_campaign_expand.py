"""Campaign expansion: order balanced across repetitions; unknown targets reported."""

from __future__ import annotations

from orchestrator.scheduling.campaign import CampaignSpec, expand

FLEET = {"se-01": ["op0", "op1"], "se-02": ["op0"]}


def test_order_alternates_between_repetitions() -> None:
    spec = CampaignSpec.model_validate({
        "name": "x", "repetitions": 2,
        "steps": [{"experiment": "a", "nodes": ["se-02"]}, {"experiment": "b",
                                                            "nodes": ["se-02"]}]})
    got = [r.experiment for r in expand(spec, FLEET).requests]
    assert got == ["a", "b", "b", "a"]


def test_all_nodes_and_interfaces_by_default_and_skips_named() -> None:
    spec = CampaignSpec.model_validate({
        "name": "x", "steps": [{"experiment": "tat"},
                               {"experiment": "tat", "nodes": ["no-such"]},
                               {"experiment": "tat", "nodes": ["se-02"], "interfaces": ["op9"]}]})
    e = expand(spec, FLEET)
    assert [(r.node_id, r.interface) for r in e.requests] == [
        ("se-01", "op0"), ("se-01", "op1"), ("se-02", "op0")]
    assert any("no-such" in s for s in e.skipped)
    assert any("op9" in s for s in e.skipped)
