"""Heartbeat capacity of the orchestrator API with N simulated nodes.

Starts a real orchestrator (uvicorn, SQLite file) in a child process, provisions and
registers N nodes with two SIMs each, then lets N simulated agents heartbeat through
persistent connections as fast as the server answers, with C in flight at a time, for
a fixed time. Prints requests/s with p50/p99 latency, against a baseline measured in
the same run: GET /healthz, which has no database work (the framework's ceiling).

    .venv/bin/python bench/heartbeats.py --nodes 1000 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the real orchestrator process, as the tests start it
from tests.integration.live import ADMIN_TOKEN as ADMIN  # noqa: E402
from tests.integration.live import orchestrator  # noqa: E402


async def provision(base: str, nodes: int) -> list[str]:
    tokens: list[str] = []
    async with httpx.AsyncClient(base_url=base, timeout=30,
                                 headers={"Authorization": f"Bearer {ADMIN}"}) as c:
        for i in range(nodes):
            r = await c.post("/api/v1/nodes", json={"id": f"n-{i:05d}", "country": "SE"})
            r.raise_for_status()
            token = r.json()["token"]
            reg = {"agent_version": "bench", "interfaces": [
                {"name": f"op{k}", "operator": {"mcc_mnc": f"240-0{k + 1}", "name": f"Op{k}"}}
                for k in range(2)]}
            r = await c.post("/api/v1/agent/register", json=reg,
                             headers={"Authorization": f"Bearer {token}"})
            r.raise_for_status()
            tokens.append(token)
    return tokens


def heartbeat_body() -> dict[str, object]:
    return {
        "sent_at": datetime.now(UTC).isoformat(), "disk_free_bytes": 10**10,
        "clock_offset_s": 0.001,
        "interfaces": [
            {"name": f"op{k}", "operator": {"mcc_mnc": f"240-0{k + 1}", "name": f"Op{k}"},
             "rx_bytes": 123456, "tx_bytes": 654321} for k in range(2)],
    }


async def load(base: str, tokens: list[str], seconds: float, concurrency: int,
               path: str) -> list[float]:
    latencies: list[float] = []
    end = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as c:
        async def worker(w: int) -> None:
            i = w
            while time.monotonic() < end:
                token = tokens[i % len(tokens)]
                i += concurrency
                t0 = time.perf_counter()
                if path == "heartbeat":
                    r = await c.post("/api/v1/agent/heartbeat", json=heartbeat_body(),
                                     headers={"Authorization": f"Bearer {token}"})
                else:
                    r = await c.get("/healthz")
                r.raise_for_status()
                latencies.append(time.perf_counter() - t0)

        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return latencies


def summary(name: str, lat: list[float], seconds: float) -> float:
    lat.sort()
    rps = len(lat) / seconds
    p50 = statistics.median(lat) * 1e3
    p99 = lat[int(len(lat) * 0.99) - 1] * 1e3
    print(f"{name:<22} {rps:9.1f} req/s   p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   n={len(lat)}")
    return rps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, orchestrator(
        Path(tmp), TESTBED_HEALTH__HEARTBEAT_INTERVAL_S="60"
    ) as live:
        base = live.url
        t0 = time.monotonic()
        tokens = asyncio.run(provision(base, args.nodes))
        print(f"provisioned and registered {args.nodes} nodes in "
              f"{time.monotonic() - t0:.1f} s")
        base_rps = summary("baseline GET /healthz",
                           asyncio.run(load(base, tokens, args.seconds, args.concurrency,
                                            "healthz")), args.seconds)
        hb_rps = summary("POST heartbeat",
                         asyncio.run(load(base, tokens, args.seconds, args.concurrency,
                                          "heartbeat")), args.seconds)
        print(f"heartbeat / baseline ratio: {hb_rps / base_rps:.2f}")
        need = args.nodes / 60
        print(f"{args.nodes} nodes at a 60 s heartbeat need {need:.1f} req/s: "
              f"capacity is {hb_rps / need:.0f}x that")


if __name__ == "__main__":
    main()
