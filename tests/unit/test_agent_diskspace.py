"""Whether the next run fits on the node's disk (node_agent.diskspace)."""

from __future__ import annotations

import errno

from node_agent.diskspace import (
    capture_bytes,
    disk_refusal,
    run_footprint,
    write_failure_reason,
)

MB = 10**6


def test_a_headers_only_capture_is_a_fraction_of_the_traffic() -> None:
    # 100 MB at 1000 bytes a packet: 100,000 records of 96 + 16 bytes
    assert capture_bytes(100 * MB, snaplen=96, max_file_bytes=10**9) == 11_200_000
    # full packets: the traffic plus a record header per packet
    assert capture_bytes(100 * MB, snaplen=65535, max_file_bytes=10**9) == 101_600_000


def test_a_capture_is_capped_at_its_largest_file() -> None:
    assert capture_bytes(10**10, snaplen=96, max_file_bytes=200 * MB) == 200 * MB


def test_footprint_counts_each_capture_twice_and_the_floor() -> None:
    fp = run_footprint(100 * MB, captures=2, snaplen=96, capture_max_bytes=10**9,
                       floor_bytes=200 * MB)
    assert (fp.captures, fp.bundle, fp.floor) == (22_400_000, 22_400_000, 200 * MB)
    assert fp.total == 244_800_000
    off = run_footprint(100 * MB, captures=0, snaplen=96, capture_max_bytes=10**9,
                        floor_bytes=200 * MB)
    assert off.total == 200 * MB


def test_a_run_that_fits_is_not_refused() -> None:
    fp = run_footprint(100 * MB, captures=2, snaplen=96, capture_max_bytes=10**9,
                       floor_bytes=200 * MB)
    assert disk_refusal(free_bytes=fp.total, footprint=fp, path="/s", spooled_bundles=3,
                        spooled_bytes=5 * MB) is None


def test_a_run_that_does_not_fit_is_refused_saying_what_to_do() -> None:
    fp = run_footprint(100 * MB, captures=2, snaplen=96, capture_max_bytes=10**9,
                       floor_bytes=200 * MB)
    reason = disk_refusal(free_bytes=fp.total - 1, footprint=fp, path="/var/lib/agent",
                          spooled_bundles=3, spooled_bytes=5_500_000)
    assert reason is not None
    assert reason.startswith(
        "node disk too full: 244 MB free in /var/lib/agent, the run needs ~245 MB "
        "(~23 MB of captures, as much again for its bundle, and 200 MB kept free, "
        "min_free_disk_bytes); upload the spool (let the node reach the orchestrator: "
        "3 bundles (6 MB) wait in the spool and free their space once uploaded) or free "
        "space there"), reason
    assert reason.endswith("Spooled results are never deleted to make room")
    assert len(reason) < 2000  # a StateReport's reason


def test_a_bigger_reservation_needs_more_room() -> None:
    def refused(max_bytes: int) -> bool:
        fp = run_footprint(max_bytes, captures=1, snaplen=96, capture_max_bytes=10**9,
                           floor_bytes=10 * MB)
        return disk_refusal(free_bytes=50 * MB, footprint=fp, path="/s", spooled_bundles=0,
                            spooled_bytes=0) is not None

    assert not refused(100 * MB)  # 10 + 2 * 11.2 MB
    assert refused(200 * MB)  # 10 + 2 * 22.4 MB
    fp = run_footprint(200 * MB, captures=1, snaplen=96, capture_max_bytes=10**9,
                       floor_bytes=10 * MB)
    reason = disk_refusal(free_bytes=50 * MB, footprint=fp, path="/s", spooled_bundles=0,
                          spooled_bytes=0)
    assert reason is not None and "the spool is empty" in reason


def test_a_full_disk_during_the_run_is_named() -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/s/work/r/meta/run.json")
    assert write_failure_reason(full).startswith(
        "node disk filled during the run (No space left on device writing "
        "/s/work/r/meta/run.json); its results are incomplete. Earlier bundles stay in "
        "the spool")
    other = OSError(errno.EACCES, "Permission denied", "/s/x")
    assert write_failure_reason(other) == (
        "node could not write the run's files (Permission denied writing /s/x)")
