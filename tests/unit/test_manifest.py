"""Manifests: the shipped catalogue loads; malformed ones are refused by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.catalogue.loader import load_catalogue
from orchestrator.catalogue.manifest import ManifestError, parse_manifest

GOOD = """
name: demo
version: 1
image: testbed/exp-demo:1
result: {file: out.json, format: testbed.demo, version: 1}
parameters:
  duration_s: {type: number, minimum: 1, default: 10}
duration_s: "duration_s + 5"
data_volume_bytes: "rate_bps / 8 * duration_s"
"""


def test_shipped_catalogue_loads(repo: Path) -> None:
    catalogue = load_catalogue(repo / "experiments")
    assert "tat" in catalogue
    tat = catalogue["tat"]
    slot, volume = tat.forecast(tat.resolve_parameters({"duration_s": 20}), rate_bps=10e6)
    assert slot > 20 and volume > 10e6 / 8 * 20


def test_defaults_and_forecast() -> None:
    m = parse_manifest(GOOD, source="demo.yaml")
    params = m.resolve_parameters({})
    assert params == {"duration_s": 10}
    assert m.forecast(params, rate_bps=8e6) == (15.0, 10_000_000)


@pytest.mark.parametrize(("mutation", "needle"), [
    (("image: testbed/exp-demo:1\n", ""), "image"),
    (("version: 1\n", "version: zero\n"), "version"),
    (('"duration_s + 5"', '"duration_s + secret"'), "secret"),
    (("minimum: 1", "minimum: [oops]"), "invalid schema"),
    (("name: demo", "name: demo\nsurprise: 1"), "surprise"),
    (("default: 10", "default: -4"), "defaults do not work"),
])
def test_malformed_manifest_names_the_problem(mutation: tuple[str, str], needle: str) -> None:
    text = GOOD.replace(*mutation)
    with pytest.raises(ManifestError) as err:
        parse_manifest(text, source="experiments/demo/experiment.yaml")
    assert "experiments/demo/experiment.yaml" in str(err.value)
    assert needle in str(err.value)


def test_not_yaml() -> None:
    with pytest.raises(ManifestError, match="not valid YAML"):
        parse_manifest("name: [unclosed", source="x.yaml")


def test_resources_and_capabilities_are_read() -> None:
    m = parse_manifest(GOOD + "resources: {memory_mb: 128, results_mb: 16}\n"
                       "capabilities: [NET_RAW]\n", source="demo.yaml")
    assert m.resources.memory_mb == 128 and m.resources.results_mb == 16
    assert m.resources.pids is None  # the node's default
    assert m.capabilities == ("NET_RAW",)


@pytest.mark.parametrize(("extra", "needle"), [
    ("capabilities: [NET_ADMIN]\n", "['NET_ADMIN'] cannot be granted to a run"),
    ("capabilities: [SYS_ADMIN, NET_RAW]\n", "['SYS_ADMIN'] cannot be granted to a run"),
    ("resources: {memory_mb: 1}\n", "resources.memory_mb"),
    ("resources: {swap_mb: 10}\n", "resources.swap_mb"),
])
def test_what_a_run_cannot_have_is_refused_at_load(extra: str, needle: str) -> None:
    with pytest.raises(ManifestError, match=re.escape(needle)):
        parse_manifest(GOOD + extra, source="demo.yaml")
