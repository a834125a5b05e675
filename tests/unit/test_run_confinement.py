"""A run's confinement, the pure parts (node_agent.confinement, node_agent.engine's
options, node_agent.limits): what the manifest asks, the node's policy caps; a bound
reached is a named reason; the engine's options drop every capability but the declared
ones. The real engine's side is tests/integration/test_hostile_runs.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from node_agent.config import RunLimitsConfig, RunPolicy, parse_config
from node_agent.confinement import BoundsUsage, VolumeUsage, bound_reached, end_bound, run_limits
from node_agent.engine import confinement_options, parse_statfs, tmpfs_options
from node_agent.errors import ConfigError, RunnerError
from node_agent.limits import Observation, StopCause, decide, ended
from node_agent.spec import build_spec
from testbed_common.states import RunState
from testbed_common.wire import Assignment, RunResources

POLICY = RunPolicy(default=RunLimitsConfig(memory_mb=512, cpus=1.0, pids=256, results_mb=256,
                                           result_files=10_000, tmp_mb=64),
                   cap=RunLimitsConfig(memory_mb=1024, cpus=2.0, pids=1024, results_mb=1024,
                                       result_files=100_000, tmp_mb=256),
                   capabilities=("NET_RAW",))
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_a_manifest_that_asks_nothing_gets_the_nodes_defaults() -> None:
    limits = run_limits(RunResources(), (), POLICY)
    assert (limits.memory_mb, limits.cpus, limits.pids) == (512, 1.0, 256)
    assert (limits.results_mb, limits.result_files, limits.tmp_mb) == (256, 10_000, 64)
    assert limits.capabilities == ()
    # Its results and /tmp live in memory: the engine's limit holds all three.
    assert limits.memory_limit_mb == 512 + 256 + 64


def test_what_a_manifest_asks_is_capped_by_the_node() -> None:
    limits = run_limits(RunResources(memory_mb=4096, cpus=0.5, pids=100_000, results_mb=8),
                        ["NET_RAW"], POLICY)
    assert (limits.memory_mb, limits.cpus, limits.pids, limits.results_mb) == (1024, 0.5,
                                                                               1024, 8)
    assert limits.capabilities == ("NET_RAW",)
    assert limits.to_json()["memory_limit_mb"] == 1024 + 8 + 64


def test_a_capability_the_node_does_not_grant_refuses_the_run() -> None:
    with pytest.raises(RunnerError, match=r"node does not grant \['NET_BIND_SERVICE'\]"):
        run_limits(RunResources(), ["NET_BIND_SERVICE"], POLICY)


def test_an_assignment_carries_only_allowed_capabilities() -> None:
    with pytest.raises(ValueError, match="not allowed"):
        Assignment(run_id="r", experiment="e", image="i", parameters={}, interface="op0",
                   not_before=NOW, deadline=NOW, max_bytes=1, capabilities=["SYS_ADMIN"])


def test_a_node_policy_cannot_grant_more_than_the_allowed_list() -> None:
    raw = {"node_id": "n", "orchestrator_url": "http://o", "netns_container": "ns",
           "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "T"},
                           "server_address": "10.0.0.1"}],
           "run_policy": {"capabilities": ["NET_ADMIN"]}}
    with pytest.raises(ConfigError, match="NET_ADMIN"):
        parse_config(raw, {"TESTBED_NODE_TOKEN": "t"})


def test_the_engines_options_drop_everything_but_what_was_declared() -> None:
    limits = run_limits(RunResources(cpus=0.5, pids=64), ["NET_RAW"], POLICY)
    opts = confinement_options(limits)
    assert opts["cap_drop"] == ["ALL"] and opts["cap_add"] == ["NET_RAW"]
    assert opts["security_opt"] == ["no-new-privileges"]  # default seccomp: none named
    assert opts["privileged"] is False and opts["read_only"] is True
    assert opts["mem_limit"] == opts["memswap_limit"] == f"{limits.memory_limit_mb}m"
    assert opts["nano_cpus"] == 500_000_000 and opts["pids_limit"] == 64
    assert confinement_options(run_limits(RunResources(), (), POLICY))["cap_add"] is None


def test_the_volumes_are_bounded_in_bytes_and_files() -> None:
    opts = tmpfs_options(run_limits(RunResources(results_mb=8, result_files=500, tmp_mb=4),
                                    (), POLICY))
    assert opts["results"] == "size=8m,nr_inodes=501,mode=1777"  # its root is one inode
    assert opts["tmp"] == "size=4m,mode=1777"


def test_statfs_lines_are_read() -> None:
    [results, tmp] = parse_statfs("4096 2048 0 501 400\n4096 1024 1024 1000 999\n")
    assert results.size_bytes == 8 * 2**20 and results.full and not results.out_of_files
    assert tmp.used_bytes == 0 and not tmp.full


LIMITS = run_limits(RunResources(results_mb=8, result_files=500, tmp_mb=4, pids=64), (),
                    POLICY)
ROOM = VolumeUsage(size_bytes=8 * 2**20, free_bytes=4 * 2**20, files=501, free_files=400)


@pytest.mark.parametrize(("usage", "reason"), [
    (BoundsUsage(results=ROOM, tmp=ROOM, pids=3), None),
    (BoundsUsage(), None),  # nothing could be read: no bound is assumed reached
    (BoundsUsage(results=VolumeUsage(8 * 2**20, 0, 501, 300)),
     "results over their bound of 8 MB"),
    (BoundsUsage(results=VolumeUsage(8 * 2**20, 2**20, 501, 0)),
     "results over their bound of 500 files"),
    (BoundsUsage(results=ROOM, tmp=VolumeUsage(4 * 2**20, 4096, 100, 90)),
     "/tmp over its bound of 4 MB"),
    (BoundsUsage(results=ROOM, pids=64), "reached its process limit of 64"),
])
def test_a_bound_reached_is_named(usage: BoundsUsage, reason: str | None) -> None:
    got = bound_reached(usage, LIMITS)
    assert (got is None) if reason is None else (got is not None and got.startswith(reason))


def test_an_out_of_memory_kill_is_named_first() -> None:
    reason = end_bound(BoundsUsage(results=ROOM), LIMITS, oom_killed=True)
    assert reason is not None
    assert reason.startswith(f"out of memory: killed at its memory limit of "
                             f"{LIMITS.memory_limit_mb} MB")


def test_a_bound_stops_the_run_after_the_reservation_and_before_the_deadline() -> None:
    base = Observation(now=NOW, deadline=NOW + timedelta(seconds=10), used_bytes=0,
                       max_bytes=100, over_bound="results over their bound of 8 MB")
    stop = decide(base)
    assert stop is not None and stop.cause == StopCause.BOUND
    assert stop.state == RunState.FAILED and stop.reason == base.over_bound
    over = decide(Observation(now=NOW, deadline=NOW, used_bytes=101, max_bytes=100,
                              over_bound="x"))
    assert over is not None and over.cause == StopCause.OVERRUN
    late = decide(Observation(now=NOW, deadline=NOW, used_bytes=0, max_bytes=100,
                              over_bound="x"))
    assert late is not None and late.cause == StopCause.BOUND


def test_a_run_that_ended_at_a_bound_fails_whatever_its_exit_code() -> None:
    state, reason = ended(None, exit_code=0, stderr="", bound="results over their bound")
    assert state == RunState.FAILED
    assert reason == "results over their bound; experiment exited with code 0"
    assert ended(None, exit_code=0, stderr="")[0] == RunState.UPLOADING


def test_a_run_needing_a_capability_the_node_does_not_grant_is_refused_at_deploy() -> None:
    config = parse_config(
        {"node_id": "n", "orchestrator_url": "http://o", "netns_container": "ns",
         "interfaces": [{"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "T"},
                         "server_address": "10.0.0.1"}],
         "run_policy": {"capabilities": ["NET_RAW"]}},
        {"TESTBED_NODE_TOKEN": "t"})
    a = Assignment(run_id="r", experiment="e", image="i", parameters={}, interface="op0",
                   not_before=NOW, deadline=NOW, max_bytes=1,
                   capabilities=["NET_BIND_SERVICE"])
    with pytest.raises(RunnerError, match="node does not grant"):
        build_spec(a, config, interface_address=None)
    spec = build_spec(a.model_copy(update={"capabilities": ["NET_RAW"],
                                           "resources": RunResources(memory_mb=64)}),
                      config, interface_address=None)
    assert spec.limits.capabilities == ("NET_RAW",) and spec.limits.memory_mb == 64
