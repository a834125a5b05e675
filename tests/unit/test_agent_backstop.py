"""The kernel quota backstop's scripts and its reading of nft's listing (pure)."""

from __future__ import annotations

import pytest

from node_agent.backstop import (
    DRIFT_SLACK_BYTES,
    TABLE,
    BackstopError,
    arm_script,
    disarm_script,
    drifted,
    parse_quota,
    quota_name,
    rearm_script,
)


def test_arm_matches_the_run_address_both_ways_and_disarm_undoes_it() -> None:
    script = arm_script("r-20261123T1200-ab", interface="op0", address="172.30.1.21",
                        limit_bytes=2_000_000)
    q = quota_name("r-20261123T1200-ab")
    assert q == "run_r_20261123T1200_ab"
    assert f"add quota inet {TABLE} {q} {{ over 2000000 bytes; }}" in script
    assert f'oifname "op0" ip saddr 172.30.1.21 quota name "{q}" drop' in script
    assert f'ip daddr 172.30.1.21 quota name "{q}" drop' in script
    # prerouting and postrouting see the node's own packets and those it forwards (a
    # confined run's); the uplink after source NAT, the downlink before its reversal
    assert "hook postrouting priority 300" in script
    assert "hook prerouting priority -150" in script
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


def test_rearm_replaces_the_quota_in_one_script_with_its_count_set() -> None:
    """The chains emptied, the quota of the same name and limit replaced by one that has
    counted what the interface moved, the rules put back: one nft transaction."""
    q = quota_name("r-1")
    script = rearm_script("r-1", interface="op0", address="172.30.1.21",
                          limit_bytes=17_000_000, used_bytes=2_961_055).splitlines()
    assert script == [
        f"flush chain inet {TABLE} out_r_1",
        f"flush chain inet {TABLE} in_r_1",
        f"delete quota inet {TABLE} {q}",
        f"add quota inet {TABLE} {q} {{ over 17000000 bytes used 2961055 bytes; }}",
        f'add rule inet {TABLE} out_r_1 oifname "op0" ip saddr 172.30.1.21 '
        f'quota name "{q}" drop',
        f'add rule inet {TABLE} in_r_1 ip daddr 172.30.1.21 quota name "{q}" drop',
    ]
    with pytest.raises(ValueError, match="negative"):
        rearm_script("r-1", interface="op0", address=None, limit_bytes=10, used_bytes=-1)


@pytest.mark.parametrize(("kernel", "interface", "limit", "ahead"), [
    (17_000_000, 2_961_055, 17_000_000, True),    # the Ansible rig's tbf link
    (3_000_000, 3_020_000, 17_000_000, False),    # counters ahead: link-layer headers
    (3_000_000 + DRIFT_SLACK_BYTES, 3_000_000, 5_000_000, False),  # a read apart
    (3_000_000 + DRIFT_SLACK_BYTES + 1, 3_000_000, 5_000_000, True),
    (640_000_000, 600_000_000, 1_000_000_000, False),  # within 5 % of a large limit
    (660_000_000, 600_000_000, 1_000_000_000, True),
    # A quota rightly spent goes on counting what it drops; the counters, near the
    # limit, carry link-layer headers: no setting back there.
    (2_600_000, 1_950_000, 2_000_000, False),
    (2_600_000, 2_000_000 - DRIFT_SLACK_BYTES, 2_000_000, False),
    (2_600_000, 2_000_000 - DRIFT_SLACK_BYTES - 1, 2_000_000, True),
])
def test_a_kernel_count_ahead_of_the_interface_by_more_than_a_read_is_drift(
        kernel: int, interface: int, limit: int, ahead: bool) -> None:
    assert drifted(kernel, interface, limit) is ahead
