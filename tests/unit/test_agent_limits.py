"""The agent's enforcement decisions and clock/backoff arithmetic (pure)."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest

from node_agent.backoff import Backoff, register_backoff
from node_agent.clock import clock_offset_s
from node_agent.interfaces import Counters
from node_agent.limits import Usage, exit_reason

T0 = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)


def test_usage_counts_both_directions() -> None:
    assert Usage(Counters(100, 1000), Counters(600, 1500)).bytes == 1000


def test_usage_survives_a_counter_reset() -> None:
    # Interface re-created mid-run: counters restart near 0; count what the new one saw.
    assert Usage(Counters(10_000, 20_000), Counters(300, 400)).bytes == 700


def test_exit_reason_uses_the_last_stderr_line() -> None:
    stderr = "tat: iperf3 -c ...\ntat failed: unable to connect to server\n\n"
    assert exit_reason(1, stderr) == (
        "experiment exited with code 1: tat failed: unable to connect to server"
    )
    assert exit_reason(2, "") == "experiment exited with code 2 (no stderr)"
    assert len(exit_reason(1, "x" * 5000)) <= 2000
    assert exit_reason(0, "whatever").startswith("experiment finished")


def test_clock_offset_is_the_midpoint_estimate() -> None:
    # Agent clock 2 s ahead, 0.4 s round trip, the server stamps the middle.
    sent = T0
    server = T0 + timedelta(seconds=0.2) - timedelta(seconds=2)
    received = T0 + timedelta(seconds=0.4)
    assert clock_offset_s(sent_at=sent, received_at=received, server_time=server) == 2.0


def test_backoff_grows_to_its_cap_with_jitter() -> None:
    b = Backoff(initial_s=1, max_s=10, jitter=0.2, rng=random.Random(1))
    delays = [b.next_delay() for _ in range(8)]
    assert 0.8 <= delays[0] <= 1.0
    assert all(8.0 <= d <= 10.0 for d in delays[4:])
    b.reset()
    assert b.failures == 0 and b.next_delay() <= 1.0



def test_registration_tries_often_while_its_orchestrator_starts_then_backs_off() -> None:
    """A node started beside its orchestrator registers within a fifth of a second of its
    first answer for the first five seconds; a node whose orchestrator stays away slows
    down to its cap (no thundering herd)."""
    b = register_backoff(60)
    b.jitter = 0.0
    delays = [b.next_delay() for _ in range(60)]
    assert all(d == 0.2 for d in delays[:25])
    assert sum(delays[:25]) == pytest.approx(5.0)
    assert delays[25] == 0.2 and delays[26] == pytest.approx(0.25)
    assert delays[-1] == 60
    assert all(a <= b for a, b in itertools.pairwise(delays))
