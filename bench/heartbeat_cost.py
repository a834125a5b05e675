"""CPU per heartbeat: the orchestrator's and PostgreSQL's, of one source tree or two.

The load bench (``bench/load.py``) shows whether the fleet's heartbeats fit in the
machine; this says what one heartbeat costs, so that a change to its path can be
judged in a minute rather than a load run. Per source tree, in turn on a fresh
database of the same seed (``load.seed``: N nodes with 3 SIMs, 30 days of settled runs,
the next 25 h of runs, 24 of them held): ``testbed serve --workers 1`` from that tree,
a warm-up, then B heartbeats like the load bench's (3 interfaces, the 24 held runs
listed), C in flight at a time, cycling through the nodes. The CPU of the orchestrator
process and of the PostgreSQL server's processes is read from ``/proc`` before and
after; their idle rate (the background loops, measured for a few seconds beforehand)
is subtracted. With ``--against DIR`` (another checkout, e.g. ``git archive main``
unpacked) both trees are measured in the same run and the ratio printed.

    .venv/bin/python bench/heartbeat_cost.py --nodes 1000 --beats 3000
    .venv/bin/python bench/heartbeat_cost.py --against /tmp/main-tree --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
from load import ADMIN, heartbeat_body, node_token, seed  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int, *, children: bool = False) -> float:
    """User plus system CPU of ``pid`` (and of its reaped children), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICK


def _postgres_cpu_s(port: int) -> float:
    """The PostgreSQL server's CPU: the postmaster's (with its exited backends') and
    its live backends'."""
    master = None
    procs: list[tuple[int, int]] = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if cmd and cmd[0].endswith(b"postgres") and f"-p {port}".encode() in b" ".join(cmd):
            master = int(d.name)
        procs.append((int(d.name), ppid))
    if master is None:
        raise RuntimeError(f"no postmaster on port {port}")
    total = _cpu_s(master, children=True)
    for pid, ppid in procs:
        if ppid == master:
            # exited meanwhile: in the postmaster's children's time at the next read
            with contextlib.suppress(OSError):
                total += _cpu_s(pid)
    return total


def _serve(src: Path, url: str, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    from tests.integration.live import free_port

    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{src / 'common'}",
           "TESTBED_ENVIRONMENT": "development", "TESTBED_ADMIN_TOKEN": ADMIN,
           "TESTBED_DATABASE_URL": url, "TESTBED_ARCHIVE_DIR": str(tmp / "archive"),
           "TESTBED_UPLOAD_DIR": str(tmp / "uploads"),
           "TESTBED_EXPERIMENTS_DIR": str(src / "experiments"),
           "TESTBED_HOST": "127.0.0.1", "TESTBED_PORT": str(port), "TESTBED_WORKERS": "1"}
    log = (tmp / "orchestrator.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", "serve"],
                            cwd=src, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise RuntimeError((tmp / "orchestrator.log").read_text())
        time.sleep(0.2)
    raise RuntimeError("orchestrator not up in 60 s")


async def _beats(base: str, nodes: list[int], concurrency: int) -> int:
    """Heartbeats of ``nodes`` in order, ``concurrency`` in flight; returns the failures."""
    failed = 0
    queue = iter(nodes)
    async with aiohttp.ClientSession(base_url=base, timeout=aiohttp.ClientTimeout(60)) as c:
        async def worker() -> None:
            nonlocal failed
            for i in queue:
                async with c.post("/api/v1/agent/heartbeat", json=heartbeat_body(i),
                                  headers={"Authorization": f"Bearer {node_token(i)}"}) as r:
                    await r.read()
                    failed += r.status != 200

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return failed


def measure(src: Path, template: str, name: str, args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.store.migrate import upgrade
    from tests.integration import postgres

    url = postgres.create_database(template, name)
    upgrade(url)
    seed(url, args.nodes, 0)
    pg_port = int(template.rsplit(":", 1)[1].split("/")[0])
    with tempfile.TemporaryDirectory() as tmp:
        proc, base = _serve(src, url, Path(tmp))
        try:
            warm = [i % args.nodes for i in range(args.warmup)]
            asyncio.run(_beats(base, warm, args.concurrency))
            idle_t, idle_api, idle_pg = time.monotonic(), _cpu_s(proc.pid), _postgres_cpu_s(
                pg_port)
            time.sleep(args.idle)
            idle_wall = time.monotonic() - idle_t
            api_rate = (_cpu_s(proc.pid) - idle_api) / idle_wall
            pg_rate = (_postgres_cpu_s(pg_port) - idle_pg) / idle_wall
            nodes = [(args.warmup + i) % args.nodes for i in range(args.beats)]
            t0, api0, pg0 = time.monotonic(), _cpu_s(proc.pid), _postgres_cpu_s(pg_port)
            failed = asyncio.run(_beats(base, nodes, args.concurrency))
            wall = time.monotonic() - t0
            api = _cpu_s(proc.pid) - api0 - api_rate * wall
            pg = _postgres_cpu_s(pg_port) - pg0 - pg_rate * wall
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    return {"src": str(src), "beats": args.beats, "failed": failed, "wall_s": wall,
            "per_s": args.beats / wall, "api_ms": 1e3 * api / args.beats,
            "pg_ms": 1e3 * pg / args.beats, "idle_api_ms_per_s": 1e3 * api_rate,
            "idle_pg_ms_per_s": 1e3 * pg_rate}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--beats", type=int, default=3000, help="heartbeats measured per tree")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--idle", type=float, default=5.0, help="seconds of idle CPU measured")
    ap.add_argument("--rounds", type=int, default=1, help="measurements per tree, alternated")
    ap.add_argument("--against", type=Path, help="another source tree, measured first")
    args = ap.parse_args()
    from tests.integration import postgres

    trees = ([args.against.resolve()] if args.against else []) + [REPO]
    rows: list[dict[str, Any]] = []
    with postgres.server() as template:
        for k in range(args.rounds):
            for t, src in enumerate(trees):
                row = measure(src, template, f"hb{k}_{t}", args)
                rows.append(row)
                print(f"{src.name}: {row['beats']} heartbeats ({row['failed']} failed) in "
                      f"{row['wall_s']:.1f} s ({row['per_s']:.0f}/s, {args.concurrency} in "
                      f"flight, {args.nodes} nodes): orchestrator {row['api_ms']:.2f} ms CPU "
                      f"a heartbeat, PostgreSQL {row['pg_ms']:.2f} ms (idle: "
                      f"{row['idle_api_ms_per_s']:.0f} and {row['idle_pg_ms_per_s']:.0f} "
                      f"ms/s)", flush=True)
    if args.against:
        def mean(src: Path, key: str) -> float:
            got = [r[key] for r in rows if r["src"] == str(src)]
            return sum(got) / len(got)

        for key, what in (("api_ms", "orchestrator"), ("pg_ms", "PostgreSQL")):
            before, after = mean(trees[0], key), mean(trees[1], key)
            print(f"{what} CPU a heartbeat: {before:.2f} ms -> {after:.2f} ms, "
                  f"ratio after/before {after / before:.2f}")
    print(f"load average: {Path('/proc/loadavg').read_text().strip()}")


if __name__ == "__main__":
    main()
