"""What one Prometheus scrape of the orchestrator costs at fleet scale: N nodes with 3
SIMs each (all heartbeating, all capped), the full view (the metrics token's, with the
per-node and per-SIM series). Reports series, body size and the time to render the
body (the collector's queries plus the text format), median of 5 scrapes.

Each size runs in a fresh child process on a fresh SQLite file; rows are inserted
directly (the API would take minutes to provision 10k nodes and is not what is timed).

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
    from prometheus_client import CollectorRegistry, generate_latest

    from orchestrator.bootstrap import build_context
    from orchestrator.metrics.collector import StateCollector
    from orchestrator.settings import SchedulingSettings, Settings
    from orchestrator.store.tables import Interface, Node

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
        registry = CollectorRegistry()
        registry.register(StateCollector(ctx, per_sim=True))
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            body = generate_latest(registry)
            times.append(time.perf_counter() - t0)
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        ctx.db.engine.dispose()
    return {"nodes": n_nodes, "sims": 3 * n_nodes, "series": series,
            "body_mb": len(body) / 1e6, "seconds": statistics.median(times)}


def main() -> None:
    measured = per_size(__doc__ or "", __file__, one)
    if measured is None:
        return
    rows, _ = measured
    load = os.getloadavg()
    print(f"# /metrics scrape bench (full view), {os.cpu_count()} cores, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")
    print("| nodes | SIMs | series | series per node | body MB | render s (median of 5) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['nodes']} | {r['sims']} | {r['series']} | "
              f"{r['series'] / r['nodes']:.2f} | {r['body_mb']:.1f} | {r['seconds']:.2f} |")


if __name__ == "__main__":
    main()
