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
    #: Failures retried at ``initial_s`` before the delay starts to grow.
    flat: int = 0
    rng: random.Random = field(default_factory=random.Random)
    _failures: int = 0

    def next_delay(self) -> float:
        """Delay before the next attempt after one more failure."""
        delay = min(self.max_s,
                    self.initial_s * self.factor**max(0, self._failures - self.flat))
        self._failures += 1
        return delay * (1 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self._failures = 0

    @property
    def failures(self) -> int:
        return self._failures


def register_backoff(max_s: float) -> Backoff:
    """Pacing of registrations: a node usually starts beside its orchestrator or before
    it answers (a fleet powered on together, the compose stack), so for its first five
    seconds it tries every fifth of a second, then a quarter longer each time: about
    1.5 s apart ten seconds later, and the cap after a few minutes. Each attempt is one
    request (no quick retries inside it) and, while nothing listens, one refused
    connection. Grown from the first failure (0.25 s, then a quarter more each), the
    attempts were 0.6-0.8 s apart when the orchestrator came up two seconds after its
    node, and the node registered that much later (bench/RESULTS.md)."""
    return Backoff(initial_s=0.2, factor=1.25, flat=25, max_s=max_s)
