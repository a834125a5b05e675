"""A value recomputed at most once per ``max_age_s`` in this process, for figures a
page shows that are costly to sum and may be a little old (the page says how old)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Cached(Generic[T]):
    """Callers at the same moment wait for one computation rather than each making
    their own (twenty readers of a page would otherwise sum the same figures twenty
    times at once)."""

    def __init__(self, max_age_s: float, monotonic: Callable[[], float] = time.monotonic
                 ) -> None:
        self.max_age_s = max_age_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._held: tuple[T, float] | None = None

    def get(self, compute: Callable[[], T]) -> T:
        with self._lock:
            if self._held is None or self._monotonic() - self._held[1] >= self.max_age_s:
                self._held = (compute(), self._monotonic())
            return self._held[0]
