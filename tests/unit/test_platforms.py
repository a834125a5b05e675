"""The architecture filter: nodes get only experiments whose image provides their
architecture, and the planner says why it deferred the others."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.catalogue.manifest import ManifestError, parse_manifest
from orchestrator.model.ids import NodeId
from orchestrator.model.platforms import NO_NATIVE_TOOLS_TAG, native_tools_tags
from orchestrator.scheduling.planner import DecisionKind, ReasonCode, Snapshot, plan
from orchestrator.scheduling.platforms import Mismatch, refusal
from orchestrator.scheduling.selection import NodeFacts
from testbed_common.platforms import (
    ARCHITECTURES,
    DEFAULT_ARCHITECTURE,
    node_architecture,
    oci_architecture,
    parse_platform,
)
from tests.unit.test_planner import CATALOGUE, Model, campaign, hourly, node, quotas, run

ARCH = st.sampled_from(sorted(ARCHITECTURES))


@pytest.mark.parametrize(("machine", "oci"), [
    ("x86_64", "amd64"), ("aarch64", "arm64"), ("armv7l", "arm"), ("i686", "386"),
    ("AMD64", "amd64"), ("arm64", "arm64"), ("", "unknown"), ("sparc64", "sparc64"),
])
def test_machine_names_become_oci_names(machine: str, oci: str) -> None:
    assert oci_architecture(machine) == oci


def test_a_node_that_reported_no_architecture_is_amd64() -> None:
    assert node_architecture("unknown") == DEFAULT_ARCHITECTURE == "amd64"
    assert node_architecture("aarch64") == "arm64"


@given(arch=ARCH, provided=st.sets(ARCH, min_size=1))
def test_a_node_is_refused_exactly_when_no_platform_names_its_architecture(
        arch: str, provided: set[str]) -> None:
    image = Model(platforms=tuple(f"linux/{a}" for a in sorted(provided)))
    found = refusal(NodeFacts(NodeId("n-01"), "SE", architecture=arch), "exp", image)
    assert (found is None) == (arch in provided)
    if found is not None:
        assert found.kind is Mismatch.ARCHITECTURE
        assert found.message == (f"architecture: node n-01 is {arch}, experiment exp "
                                 f"provides {', '.join(image.platforms)}")


@given(tools=st.booleans(), tagged=st.booleans())
def test_native_tools_are_refused_only_on_a_node_without_them(tools: bool,
                                                             tagged: bool) -> None:
    tags = frozenset({NO_NATIVE_TOOLS_TAG} if tagged else ())
    found = refusal(NodeFacts(NodeId("de-01"), "DE", architecture="amd64", tags=tags),
                    "tat", Model(native_tools=tools))
    assert (found is not None) == (tools and tagged)


@given(tags=st.lists(st.sampled_from(["a", "b", NO_NATIVE_TOOLS_TAG]), unique=True),
       has=st.booleans())
def test_the_native_tools_tag_follows_the_report_and_keeps_the_others(
        tags: list[str], has: bool) -> None:
    out = native_tools_tags(tags, has_tools=has)
    assert (NO_NATIVE_TOOLS_TAG in out) == (not has)
    assert [t for t in out if t != NO_NATIVE_TOOLS_TAG] == [
        t for t in tags if t != NO_NATIVE_TOOLS_TAG]


def test_the_planner_defers_an_arm64_node_for_an_amd64_only_experiment() -> None:
    nodes = [node("se-01", n_sims=1), node("de-01", n_sims=1, architecture="arm64")]
    p = run(Snapshot(now=campaign().submitted_at, nodes=nodes, catalogue=CATALOGUE,
                     quotas=quotas(nodes)), campaign(recurrence=hourly(2)))
    assert {b.node for b in p.bookings()} == {"se-01"}
    [d] = p.decisions
    assert (d.kind, d.code, d.node) == (DecisionKind.DEFERRED, ReasonCode.ARCHITECTURE,
                                        "de-01")
    assert d.message == ("deferred: architecture: node de-01 is arm64, experiment tat "
                         "provides linux/amd64")


def test_a_multi_platform_experiment_is_booked_on_both_and_a_tool_one_is_not() -> None:
    catalogue: dict[str, Any] = {
        "hello": Model(platforms=("linux/amd64", "linux/arm64")),
        "tat": Model(platforms=("linux/amd64", "linux/arm64"), native_tools=True)}
    nodes = [node("se-01", n_sims=1),
             node("de-01", n_sims=1, architecture="arm64",
                  tags=frozenset({NO_NATIVE_TOOLS_TAG}))]
    snap = Snapshot(now=campaign().submitted_at, nodes=nodes, catalogue=catalogue,
                    quotas=quotas(nodes))
    hello = plan(snap, [campaign("c1", steps=[{"experiment": "hello"}],
                                 recurrence=hourly(1))], horizon=timedelta(days=1))
    assert {b.node for b in hello.bookings()} == {"se-01", "de-01"}
    assert not hello.decisions
    both = plan(snap, [campaign("c2", steps=[{"experiment": "hello"}, {"experiment": "tat"}],
                                recurrence=hourly(1))], horizon=timedelta(days=1))
    assert {b.node for b in both.bookings()} == {"se-01"}
    assert [(d.code, d.node) for d in both.decisions] == [(ReasonCode.NATIVE_TOOLS, "de-01")]
    assert "experiment tat needs them" in both.decisions[0].message


MANIFEST = """
name: hello
version: 1
image: testbed/hello:dev
result: {file: result.json, format: hello, version: 1}
duration_s: 10
data_volume_bytes: 0
"""


def test_a_manifest_without_platforms_provides_linux_amd64() -> None:
    m = parse_manifest(MANIFEST, source="hello/experiment.yaml")
    assert (m.platforms, m.native_tools) == (("linux/amd64",), False)
    m = parse_manifest(MANIFEST + "platforms: [linux/amd64, linux/arm64]\n", source="x")
    assert m.platforms == ("linux/amd64", "linux/arm64")


@pytest.mark.parametrize(("platforms", "says"), [
    ("[linux/x86_64]", "write linux/ARCH"),
    ("[windows/amd64]", "write linux/ARCH"),
    ("[]", "at least 1"),
    ("[linux/arm64, linux/arm64]", "names one twice"),
])
def test_bad_platforms_are_refused_saying_what_to_write(platforms: str, says: str) -> None:
    with pytest.raises(ManifestError) as e:
        parse_manifest(MANIFEST + f"platforms: {platforms}\n", source="hello/experiment.yaml")
    assert "hello/experiment.yaml: platforms" in str(e.value)
    assert says in str(e.value)


def test_platform_parsing_keeps_a_variant() -> None:
    assert parse_platform("linux/arm/v7") == "linux/arm/v7"
