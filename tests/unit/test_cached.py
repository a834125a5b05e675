"""A cached figure (orchestrator.services.cached): summed once, kept for its age, summed
anew after; callers at the same moment share one computation."""

from __future__ import annotations

import threading
import time

from orchestrator.services.cached import Cached


def test_a_value_is_kept_for_its_age_then_computed_anew() -> None:
    now = [100.0]
    cache: Cached[int] = Cached(30.0, monotonic=lambda: now[0])
    calls = []

    def compute() -> int:
        calls.append(now[0])
        return len(calls)

    assert cache.get(compute) == 1
    now[0] = 129.9
    assert cache.get(compute) == 1
    now[0] = 130.0
    assert cache.get(compute) == 2
    assert calls == [100.0, 130.0]


def test_callers_at_the_same_moment_wait_for_one_computation() -> None:
    cache: Cached[int] = Cached(30.0)
    calls = []

    def slow() -> int:
        calls.append(1)
        time.sleep(0.2)
        return 7

    got: list[int] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get(slow)))
               for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [7] * 5 and calls == [1]
