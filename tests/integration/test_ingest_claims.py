"""Ingest in several workers at once: each archived run is claimed before it is
written, so two workers racing share the runs and write none twice, and a worker that
died holding a run is taken over once its lease has ended.

Real parts: the orchestrator app on SQLite and on a real PostgreSQL (``database_url``
runs every test on both), bundles uploaded through the agent API, the real conversion.
The store is a sink that records each write, so the test can count writes per run (the
end-to-end bench, bench/ingest_path.py, does the same against a real influxd).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from orchestrator.services import ingestclaims
from orchestrator.services.context import Context
from orchestrator.services.ingest import ingest_pending
from orchestrator.store.tables import Run
from orchestrator.timeseries.influx import TimeSeriesUnavailable
from orchestrator.timeseries.lineprotocol import Point
from tests.integration.conftest import Api, upload_tat_run

RUNS = 6
LEASE_S = 120.0


class CountingStore:
    """Records which worker wrote which runs; each write takes a little while, so that
    racing workers overlap."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.writes: list[tuple[str, str]] = []
        self.down = False
        self._lock = threading.Lock()

    def write(self, points: Sequence[Point]) -> None:
        if self.down:
            raise TimeSeriesUnavailable("store down (test)")
        time.sleep(self.delay_s)
        runs = {p.tags["run"] for p in points}
        with self._lock:
            self.writes.extend((threading.current_thread().name, r) for r in runs)


def _ctx(api: Api) -> Context:
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    return ctx


def _uploaded(api: Api, tmp: Path, n: int) -> list[str]:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    ids = []
    for _ in range(n):
        ids.append(upload_tat_run(api, token, tmp))
        api.clock.advance(30)
    return ids


def _claims(ctx: Context) -> dict[str, tuple[str | None, bool]]:
    with ctx.db.reading() as s:
        return {r.id: (r.ingest_claim, r.ingested_at is not None)
                for r in s.query(Run).all()}


def test_two_workers_racing_share_the_runs_and_write_each_once(
        api: Api, tmp_path: Path) -> None:
    ctx = _ctx(api)
    runs = _uploaded(api, tmp_path, RUNS)
    store = CountingStore(delay_s=0.05)
    start = threading.Barrier(2)

    def worker() -> None:
        start.wait()
        while ingest_pending(ctx, store, limit=2,
                             owner=threading.current_thread().name).written_runs:
            pass

    threads = [threading.Thread(target=worker, name=f"worker-{i}") for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    per_run = Counter(run for _, run in store.writes)
    assert per_run == Counter(dict.fromkeys(runs, 1))  # every run, none twice
    assert {who for who, _ in store.writes} == {"worker-1", "worker-2"}  # shared
    assert _claims(ctx) == dict.fromkeys(runs, (None, True))  # done, no claim left


def test_a_dead_workers_run_is_taken_over_after_its_lease_and_not_marked_twice(
        api: Api, tmp_path: Path) -> None:
    ctx = _ctx(api)
    first, *rest = _uploaded(api, tmp_path, 3)
    assert ctx.settings.influx.ingest_lease_s == LEASE_S
    store = CountingStore()

    # a run the store refuses is given back at once, not held for the lease
    store.down = True
    assert ingest_pending(ctx, store, owner="alive").stopped == "store down (test)"
    assert _claims(ctx)[first] == (None, False)
    store.down = False

    # a worker claims the oldest run and dies before writing it
    assert ingestclaims.claim_next(ctx, "dead", lease_s=LEASE_S) == first
    done = ingest_pending(ctx, store, owner="alive")
    assert done.written_runs == 2  # the others; the dead worker's run waits its lease
    assert Counter(r for _, r in store.writes) == Counter(rest)
    api.clock.advance(LEASE_S - 1)
    assert ingest_pending(ctx, store, owner="alive").written_runs == 0

    api.clock.advance(2)  # the lease has ended: taken over
    assert ingest_pending(ctx, store, owner="alive").written_runs == 1
    # the dead worker comes back: it holds nothing, can neither renew nor mark it done
    assert not ingestclaims.renew(ctx, first, "dead", lease_s=LEASE_S)
    assert not ingestclaims.finish(ctx, first, "dead", note="late")
    assert Counter(r for _, r in store.writes) == Counter([first, *rest])
    with ctx.db.reading() as s:
        run = s.get(Run, first)
        assert run is not None and run.ingest_note != "late" and run.ingest_claim is None

