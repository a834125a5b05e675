"""Points that arrive with heartbeats (the nodes' latest metadata) on their way to the
time-series store.

A heartbeat must never wait for InfluxDB, so its points go into this buffer and the
ingest loop writes them. While the store is down the buffer keeps the newest
``capacity`` points and counts what it drops: these are live telemetry, not results (a
run's own samples travel in its bundle, which is archived and written from there).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

from orchestrator.timeseries.lineprotocol import Point, TimeSeriesSink


class LiveBuffer:
    def __init__(self, capacity: int = 100_000) -> None:
        self._points: deque[Point] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self.dropped = 0  # points pushed out while the store was away

    def __len__(self) -> int:
        with self._lock:
            return len(self._points)

    def add(self, points: Sequence[Point]) -> None:
        with self._lock:
            overflow = len(self._points) + len(points) - (self._points.maxlen or 0)
            self.dropped += max(0, overflow)
            self._points.extend(points)

    def flush(self, sink: TimeSeriesSink, *, batch: int = 5000) -> int:
        """Writes what is buffered, oldest first; returns how many points went out. On
        a failure the unwritten points go back in front of any that arrived meanwhile
        (the sink's error is raised). The lock is not held while writing: heartbeats
        keep adding."""
        with self._lock:
            taken = list(self._points)
            self._points.clear()
        written = 0
        try:
            for i in range(0, len(taken), batch):
                chunk = taken[i:i + batch]
                sink.write(chunk)
                written += len(chunk)
        except BaseException:
            with self._lock:
                keep = [*taken[written:], *self._points]
                capacity = self._points.maxlen or len(keep)
                self.dropped += max(0, len(keep) - capacity)
                self._points = deque(keep[-capacity:], maxlen=capacity)
            raise
        return written
