"""Planner scale: 30 days of hourly sessions on N nodes with 3 SIMs each.

Each size runs in a fresh child process (so peak RSS is that size's alone, read with
``resource.getrusage(RUSAGE_SELF).ru_maxrss`` at the end). Timed: ``plan()`` only; the
snapshot (nodes, quotas, history) is built before the clock starts, and booking objects
are not materialised (the plan stores sessions as arrays; ``Plan.bookings()`` builds
objects on demand). One SIM in ten has a cap that runs out mid-month, so the quota
path and the decision aggregation are exercised, not only the happy path.

    .venv/bin/python bench/planner.py              # 1k, 3k, 10k nodes
    .venv/bin/python bench/planner.py --nodes 1000
"""

from __future__ import annotations

import os
import resource
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from children import per_size  # noqa: E402

ZONES = ["Europe/Stockholm", "Europe/Oslo", "Europe/Madrid", "America/New_York",
         "Australia/Lord_Howe", "Asia/Kolkata"]
OPERATORS = [("240-01", "Telia"), ("240-02", "Tre"), ("240-07", "Tele2")]


def one(n_nodes: int) -> dict[str, float]:
    sys.path.insert(0, str(REPO))
    from orchestrator.catalogue.manifest import parse_manifest
    from orchestrator.model.ids import CampaignId, NodeId
    from orchestrator.quotas.ledger import LedgerState, SimKey, SimQuota
    from orchestrator.scheduling.forecast import LinkHistory
    from orchestrator.scheduling.planner import Campaign, Snapshot, plan
    from orchestrator.scheduling.selection import NodeFacts, SimFacts
    from orchestrator.scheduling.spec import CampaignSpecV2

    tat = parse_manifest((REPO / "experiments/tat/experiment.yaml").read_text(), source="tat")
    now = datetime(2026, 3, 1, tzinfo=UTC)
    nodes = [
        NodeFacts(NodeId(f"n{i:05d}"), "SE", timezone=ZONES[i % len(ZONES)],
                  sims=tuple(SimFacts(f"op{k}", mcc, name)
                             for k, (mcc, name) in enumerate(OPERATORS)))
        for i in range(n_nodes)
    ]
    sims = {}
    rates = {}
    for i, node in enumerate(nodes):
        for k, s in enumerate(node.sims):
            key = SimKey(node.id, s.interface, s.mcc_mnc)
            cap = 20_000_000_000 if (i + k) % 10 else 5_000_000_000  # 1 in 10 runs out
            sims[key] = SimQuota(key, cap, reset_day=15, timezone=node.timezone)
            rates[(node.id, s.mcc_mnc)] = [10e6 + 1e5 * ((i + k + j) % 7) for j in range(24)]
    snapshot = Snapshot(now=now, nodes=nodes, catalogue={"tat": tat},
                        quotas=LedgerState(sims=sims), history=LinkHistory(rates))
    spec = CampaignSpecV2.model_validate({
        "name": "hourly-tat", "steps": [{"experiment": "tat"}],
        "recurrence": {"kind": "every", "hours": 1, "start": now.isoformat(),
                       "end": (now + timedelta(days=30)).isoformat()},
    })
    campaign = Campaign(CampaignId("c-bench"), spec, now)
    t0 = time.perf_counter()
    result = plan(snapshot, [campaign], horizon=timedelta(days=30))
    elapsed = time.perf_counter() - t0
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "nodes": n_nodes, "sims": 3 * n_nodes, "seconds": elapsed,
        "sessions": result.session_count, "decisions": len(result.decisions),
        "peak_rss_mb": rss_kib / 1024,
    }


def main() -> None:
    measured = per_size(__doc__ or "", __file__, one)
    if measured is None:
        return
    rows, _ = measured
    load = os.getloadavg()
    print(f"# planner bench, {os.cpu_count()} cores, load average {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f} at the end")
    print("| nodes | SIMs | sessions planned | decisions | plan() s | µs per node | "
          "peak RSS MB |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['nodes']} | {r['sims']} | {r['sessions']} | {r['decisions']} | "
              f"{r['seconds']:.2f} | {1e6 * r['seconds'] / r['nodes']:.0f} | "
              f"{r['peak_rss_mb']:.0f} |")
    first, last = rows[0], rows[-1]
    ratio = (last["seconds"] / last["nodes"]) / (first["seconds"] / first["nodes"])
    print(f"\ntime per node at {last['nodes']} / at {first['nodes']}: {ratio:.2f} "
          "(1.0 = linear; below 1 = fixed costs amortised)")


if __name__ == "__main__":
    main()
