"""The kernel quota backstop's scripts and its reading of nft's listing (pure)."""

from __future__ import annotations

import pytest

from node_agent.backstop import (
    TABLE,
    BackstopError,
    arm_script,
    disarm_script,
    parse_quota,
    quota_name,
)


def test_arm_matches_the_run_address_both_ways_and_disarm_undoes_it() -> None:
    script = arm_script("r-20261123T1200-ab", interface="op0", address="172.30.1.21",
                        limit_bytes=2_000_000)
    q = quota_name("r-20261123T1200-ab")
    assert q == "run_r_20261123T1200_ab"
    assert f"add quota inet {TABLE} {q} {{ over 2000000 bytes; }}" in script
    assert f'ip saddr 172.30.1.21 quota name "{q}" drop' in script
    assert f'ip daddr 172.30.1.21 quota name "{q}" drop' in script
    assert "hook output" in script and "hook input" in script
    assert disarm_script("r-20261123T1200-ab").splitlines() == [
        f"delete chain inet {TABLE} out_r_20261123T1200_ab",
        f"delete chain inet {TABLE} in_r_20261123T1200_ab",
        f"delete quota inet {TABLE} {q}",
    ]


def test_without_an_address_the_interface_name_is_matched() -> None:
    script = arm_script("r-1", interface="wwan0", address=None, limit_bytes=10)
    assert 'oifname "wwan0"' in script and 'iifname "wwan0"' in script
    v6 = arm_script("r-1", interface="wwan0", address="2001:db8::2", limit_bytes=10)
    assert "ip6 saddr 2001:db8::2" in v6
    with pytest.raises(ValueError, match="negative"):
        arm_script("r-1", interface="op0", address=None, limit_bytes=-1)


def test_quota_listing_is_read_and_its_absence_is_an_error() -> None:
    listing = ('{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"quota": {"family": '
               '"inet", "name": "run_r_1", "table": "testbed_backstop", "handle": 1, '
               '"bytes": 2000000, "used": 2000000, "inv": true}}]}')
    state = parse_quota(listing)
    assert (state.limit_bytes, state.used_bytes, state.spent) == (2_000_000, 2_000_000, True)
    with pytest.raises(BackstopError, match="no quota"):
        parse_quota('{"nftables": [{"metainfo": {}}]}')
    with pytest.raises(BackstopError, match="unreadable"):
        parse_quota("Error: No such file or directory")
