"""Retry pacing: exponential backoff with a cap and jitter (pure; the caller sleeps).

A fleet that loses its orchestrator must not come back as a thundering herd, and a
node with a bad token must not hammer the API: both pace their retries here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial_s: float = 1.0
    max_s: float = 60.0
    factor: float = 2.0
    #: Fraction of the delay randomised away (0.2: a delay of 10 s becomes 8-10 s).
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)
    _failures: int = 0

    def next_delay(self) -> float:
        """Delay before the next attempt after one more failure."""
        delay = min(self.max_s, self.initial_s * self.factor**self._failures)
        self._failures += 1
        return delay * (1 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self._failures = 0

    @property
    def failures(self) -> int:
        return self._failures


def register_backoff(max_s: float) -> Backoff:
    """Pacing of registrations: a node usually starts beside its orchestrator or before
    it answers (a fleet powered on together, the compose stack), so the first attempts
    come every quarter second or so, growing by a quarter each: about 1.5 s apart after
    5 s, and the cap after a few minutes. Each attempt is one request (no quick
    retries inside it) and, while nothing listens, one refused connection."""
    return Backoff(initial_s=0.25, factor=1.25, max_s=max_s)
