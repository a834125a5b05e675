"""What one Prometheus scrape of the orchestrator costs at fleet scale: N nodes with 3
SIMs each (all heartbeating, all capped), the full view (the metrics token's, with the
per-node and per-SIM series). Reports series, body size and the time to render the
body (the collector's queries plus the text format), median of 5 scrapes, in wall-clock
and CPU seconds (the CPU of the process that renders, which on SQLite includes the
database's work).

Each size runs in a fresh child process on a fresh SQLite file; rows are inserted
directly (the API would take minutes to provision 10k nodes and is not what is timed).
Each node has the ledger's journal of a month: a settled run every third day for 30
days (rotating its SIMs, so this period's and the period before's) and one booked run
still holding its reservation, so every SIM's sums have rows to add.

    .venv/bin/python bench/metrics_scrape.py              # 1k, 3k, 10k nodes
    .venv/bin/python bench/metrics_scrape.py --nodes 1000
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from children import per_size  # noqa: E402

OPERATORS = [("240-01", "Telia"), ("240-02", "Tre"), ("240-07", "Tele2")]


def one(n_nodes: int) -> dict[str, float]:
    sys.path.insert(0, str(REPO))
    from sqlalchemy import insert

    from orchestrator.bootstrap import build_context
    from orchestrator.metrics.collector import StateCollector
    from orchestrator.settings import SchedulingSettings, Settings
    from orchestrator.store.tables import Interface, Node, Project, Run

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            environment="development", database_url=f"sqlite:///{tmp}/testbed.db",
            archive_dir=Path(tmp) / "archive", upload_dir=Path(tmp) / "uploads",
            experiments_dir=REPO / "experiments",
            scheduling=SchedulingSettings(default_sim_cap_bytes=2 * 10**9))
        ctx = build_context(settings)
        now = datetime.now(UTC)
        with ctx.db.session() as s:
            for i in range(n_nodes):
                node = Node(id=f"n-{i:05d}", token_hash=f"{i:064x}", country="SE",
                            created_at=now, registered_at=now,
                            last_heartbeat_at=now - timedelta(seconds=i % 90),
                            clock_offset_s=0.001 * (i % 50), disk_free_bytes=10**10 + i,
                            spooled_bundles=i % 3)
                node.interfaces = [
                    Interface(name=f"op{k}", mcc_mnc=mcc, operator_name=name,
                              updated_at=now) for k, (mcc, name) in enumerate(OPERATORS)]
                s.add(node)
            project = Project(name="bench", created_at=now)
            s.add(project)
            s.flush()
            project_id = project.id
        with ctx.db.session() as s:
            s.execute(insert(Run), [run for i in range(n_nodes)
                                    for run in _runs(i, now, project_id)])
        collector = StateCollector(ctx, per_sim=True)
        times, cpu = [], []
        for _ in range(5):
            t0, c0 = time.perf_counter(), time.process_time()
            body = collector.exposition()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        ctx.db.engine.dispose()
    return {"nodes": n_nodes, "sims": 3 * n_nodes, "series": series,
            "body_mb": len(body) / 1e6, "seconds": statistics.median(times),
            "cpu_s": statistics.median(cpu), "runs": RUNS_PER_NODE * n_nodes}


#: Runs per node: a settled one every third day for 30 days, one booked.
RUNS_PER_NODE = 11


def _runs(i: int, now: datetime, project_id: int) -> list[dict[str, object]]:
    """Node ``i``'s journal (:data:`RUNS_PER_NODE` rows): the settled runs charged 24 MB
    each, in the month of their start (the SIMs' reset day is the 1st, UTC), and the
    booked one holding 25 MB of this period."""
    out: list[dict[str, object]] = []
    for j in range(RUNS_PER_NODE):
        settled = j < RUNS_PER_NODE - 1
        at = now - timedelta(days=3 * j, minutes=i % 360) if settled else now + timedelta(
            hours=1)
        k = (i + j) % len(OPERATORS)
        period = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        if at < period:
            period = (period - timedelta(days=1)).replace(day=1)
        out.append({
            "id": f"r{i:05d}-{j:02d}", "campaign_id": None, "project_id": project_id,
            "created_by": 1, "node_id": f"n-{i:05d}", "interface": f"op{k}",
            "experiment": "tat", "experiment_version": 1, "image": "testbed/tat:dev",
            "parameters": {}, "not_before": at, "deadline": at + timedelta(seconds=25),
            "forecast_bytes": 25_000_000, "state": "done" if settled else "scheduled",
            "state_reason": "seeded by the bench", "state_at": at,
            "created_at": at - timedelta(days=1), "mcc_mnc": OPERATORS[k][0],
            "reserved_bytes": 25_000_000, "reservation_period": period,
            "measured_bytes": 24_000_000 if settled else None,
            "charged_bytes": 24_000_000 if settled else None,
            "overrun_bytes": 0 if settled else None,
            "settled_at": at + timedelta(minutes=1) if settled else None})
    return out


def main() -> None:
    measured = per_size(__doc__ or "", __file__, one)
    if measured is None:
        return
    rows, _ = measured
    load = os.getloadavg()
    print(f"# /metrics scrape bench (full view), {os.cpu_count()} cores, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")
    print("| nodes | SIMs | runs | series | series per node | body MB | render s | "
          "render CPU s |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['nodes']} | {r['sims']} | {r['runs']} | {r['series']} | "
              f"{r['series'] / r['nodes']:.2f} | {r['body_mb']:.1f} | {r['seconds']:.2f} | "
              f"{r['cpu_s']:.2f} |")


if __name__ == "__main__":
    main()
