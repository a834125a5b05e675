"""Whether a release fits on its disk (orchestrator.dataset.room): the decision, and
what it tells the user to do."""

from __future__ import annotations

from orchestrator.dataset.room import footprint, refusal


def test_the_footprint_counts_whole_blocks_and_folders() -> None:
    assert footprint([1, 4096, 4097, 0], block=4096, folders=2) == (1 + 1 + 2 + 0 + 2) * 4096


def test_a_build_starts_only_outside_the_reserve() -> None:
    assert refusal(where="/r", free=10_000, reserve=10_000) is None
    said = refusal(where="/r", free=9_999, reserve=10_000)
    assert said is not None
    assert said.startswith("/r has 9,999 bytes free, and 10,000 are kept free")
    assert "TESTBED_DATASETS__RESERVE_BYTES" in said and "free space on it" in said


def test_a_release_is_refused_over_the_disk_or_the_largest_size_saying_what_to_do() -> None:
    assert refusal(where="/r", free=5_000, reserve=1_000, need=4_000, size=3_000,
                   max_bytes=3_000) is None
    full = refusal(where="/r", free=5_000, reserve=1_000, need=4_001, size=3_000,
                   max_bytes=10**9)
    assert full is not None and "the release needs 4,001 bytes there" in full
    assert "shorter period" in full and "without raw files" in full
    big = refusal(where="/r", free=10**12, reserve=0, need=4_000, size=3_001,
                  max_bytes=3_000)
    assert big is not None and big.startswith("the release would be 3,001 bytes")
    assert "TESTBED_DATASETS__MAX_RELEASE_BYTES" in big
