"""Fleet load: N simulated nodes with 3 SIMs each heartbeating once a minute, with 20
dashboard readers and 100 bundle uploads a minute at the same time, against the real
orchestrator (uvicorn, several workers) on a real PostgreSQL.

Per size, in a fresh child process: a throwaway PostgreSQL (Debian's binaries, as the
integration tests start it), migrated, then seeded in SQL: N nodes, their 3 SIMs each
with a configured cap, 30 days of finished runs (one a day per node, rotating its
SIMs, settled: the ledger's journal), the next 25 h of hourly runs per node (those of
the hand-out horizon already handed out, the last one not yet), and runs waiting for
their bundles. Each kind of row is one ``INSERT ... SELECT`` over ``generate_series``,
made by the server itself: since migration 0017 the runs have no foreign keys to check
per row, and 10,000 nodes' 550,000 runs take 8-10 s (printed per statement), outside
the measured window; a binary COPY from Python would add the client's formatting to
the same server work. Then ``testbed serve --workers W`` and, in two generator
processes (so the generator is not the bottleneck on its own core; the load goes
through aiohttp, whose cost per request does not grow with the requests in flight):

- heartbeats, open loop, in real time (no compression): node i beats at i/N of each
  minute, whatever the answers do; each reports its 3 interfaces and the 24 runs it
  holds, as an agent does. Latency is from send to answer; the generator's lateness
  against the schedule is reported too (if it lags, the figures are the generator's);
- 20 dashboard readers: each loads a page (in turn the fleet page, the campaigns page,
  a later page of the fleet's nodes and a search by node id: the state database's
  pages), then waits 10 s;
- 100 bundle uploads a minute, open loop: a ~1 MB bundle (the size of a 10 s TAT
  run's) declared, then sent in 1 MiB chunks as the agent does; archived on arrival;
- the baseline, same run: ``GET /healthz`` (no database) 5 times a second;
- Prometheus: ``GET /metrics`` with the metrics token (the full view: 5 series per node
  and 4 per SIM, 170,000 at 10k nodes) every ``--scrape-s`` seconds (60, the production
  scrape interval of docs/monitoring.md; 0: no scrape), the first a quarter interval in.

Background loops: each worker runs its own (as replicas do today): the reaper every
5 s, the planner every 60 s (no planner-managed campaign: it finds nothing to plan),
no ingest (no time-series store, so the store's pages are not in the mix).

    .venv/bin/python bench/load.py                 # 1k, 3k, 10k nodes, 90 s each
    .venv/bin/python bench/load.py --nodes 1000 --seconds 30 --workers 2
    .venv/bin/python bench/load.py --nodes 10000 --save rows.jsonl   # one size, kept
    .venv/bin/python bench/load.py --table rows.jsonl   # the table of the kept sizes

Each size prints its figures to stderr as soon as it is measured (with how long the
seeding took, outside the measured window, and ``uptime`` before and after); ``--save``
appends them to a file, so that sizes measured one at a time (one per hold of a shared
machine) make one table.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
from children import per_size  # noqa: E402

ADMIN = "bench-admin-token-0123456789abcdef"
METRICS = "bench-metrics-token-0123456789abcdef"
OPERATORS = [("240-01", "Telia"), ("240-02", "Tre"), ("240-07", "Tele2")]
HELD = 24  # runs each node holds (the hand-out horizon's hourly runs)
UPLOADS_PER_MIN = 100
READERS = 20
READER_PAUSE_S = 10.0
HEALTHZ_PER_S = 5.0
BUNDLE_PAYLOAD = 1_000_000
CHUNK = 1024 * 1024
#: What the readers load in turn: the fleet page's first page (the summary and the nodes
#: needing a look), the campaigns page, a later page of nodes, and a search by node id.
PAGES = ("/pages/fleet", "/pages/campaigns", "/pages/fleet?page=7",
         "/pages/fleet?node=n01")


def node_id(i: int) -> str:
    return f"n{i:05d}"


def node_token(i: int) -> str:
    return f"bench-node-token-{i:05d}"


def held_id(i: int, j: int) -> str:
    return f"b{i:05d}f{j:02d}"


# --- the database ----------------------------------------------------------------------

SEED = """
INSERT INTO users (id, name, is_admin, created_at) VALUES (1, 'admin', true, %(now)s);
INSERT INTO projects (id, name, created_at) VALUES (1, 'bench', %(now)s);
INSERT INTO campaigns (id, name, project_id, created_by, spec, created_at)
  VALUES ('c-bench', 'bench', 1, 1, '{}', %(now)s - interval '30 days');
INSERT INTO nodes (id, token_hash, country, timezone, model, architecture, mobility, tags,
                   maintenance, agent_version, created_at, registered_at,
                   last_heartbeat_at, clock_offset_s, disk_free_bytes, spooled_bundles)
SELECT 'n' || lpad(i::text, 5, '0'),
       encode(sha256(('bench-node-token-' || lpad(i::text, 5, '0'))::bytea), 'hex'),
       'SE', 'UTC', 'apu2', 'x86_64', 'stationary', '[]', false, 'bench',
       %(now)s, %(now)s, %(now)s, 0.001, 10000000000, 0
FROM generate_series(0, %(n)s - 1) AS i;
INSERT INTO interfaces (node_id, name, mcc_mnc, operator_name, up, rx_bytes, tx_bytes,
                        updated_at)
SELECT 'n' || lpad(i::text, 5, '0'), 'op' || k, (ARRAY['240-01','240-02','240-07'])[k + 1],
       (ARRAY['Telia','Tre','Tele2'])[k + 1], true, 0, 0, %(now)s
FROM generate_series(0, %(n)s - 1) AS i, generate_series(0, 2) AS k;
INSERT INTO sim_quotas (node_id, interface, cap_bytes, reset_day, margin, updated_at)
SELECT 'n' || lpad(i::text, 5, '0'), 'op' || k, 20000000000, 1, 0.05, %(now)s
FROM generate_series(0, %(n)s - 1) AS i, generate_series(0, 2) AS k;
"""

#: One run row's columns from ``i`` (node), ``k`` (interface), ``t`` (not_before),
#: ``st`` (state), ``rid`` (id); shared by the three kinds of run seeded.
RUN_COLUMNS = """(id, campaign_id, project_id, created_by, node_id, interface, experiment,
  experiment_version, image, parameters, not_before, deadline, forecast_bytes, state,
  state_reason, state_at, created_at, mcc_mnc, reserved_bytes, reservation_period,
  measured_bytes, charged_bytes, overrun_bytes, settled_at, session_occurrence,
  session_interfaces, step, repetition)"""
RUN_VALUES = """rid, 'c-bench', 1, 1, 'n' || lpad(i::text, 5, '0'), 'op' || k, 'tat', 1,
  'testbed/tat:dev', '{{}}', t, t + interval '25 seconds', 25000000, st, 'seeded by the bench',
  t, t - interval '1 day', (ARRAY['240-01','240-02','240-07'])[k + 1], 25000000,
  date_trunc('month', t), {measured}, {charged}, {over}, {settled}, t, 'op' || k, 0, 0"""

RUNS = f"""
INSERT INTO runs {RUN_COLUMNS}
SELECT {RUN_VALUES.format(measured="24000000", charged="24000000", over="0",
                          settled="t + interval '1 minute'")}
FROM (SELECT i, j, j %% 3 AS k, 'done' AS st,
             'b' || lpad(i::text, 5, '0') || 'h' || lpad(j::text, 3, '0') AS rid,
             %(now)s - interval '30 days' + j * interval '1 day'
                 + (i %% 360) * interval '1 minute' AS t
      FROM generate_series(0, %(n)s - 1) AS i, generate_series(0, 29) AS j) AS h;
INSERT INTO runs {RUN_COLUMNS}
SELECT {RUN_VALUES.format(measured="NULL", charged="NULL", over="NULL", settled="NULL")}
FROM (SELECT i, j, j %% 3 AS k,
             CASE WHEN j < {HELD} THEN 'assigned' ELSE 'scheduled' END AS st,
             'b' || lpad(i::text, 5, '0') || 'f' || lpad(j::text, 2, '0') AS rid,
             %(now)s + interval '2 minutes' + j * interval '1 hour'
                 + (i %% 60) * interval '1 minute' AS t
      FROM generate_series(0, %(n)s - 1) AS i, generate_series(0, {HELD}) AS j) AS f;
INSERT INTO runs {RUN_COLUMNS}
SELECT {RUN_VALUES.format(measured="NULL", charged="NULL", over="NULL", settled="NULL")}
FROM (SELECT i, 0 AS k, 'uploading' AS st, 'b' || lpad(i::text, 5, '0') || 'u' AS rid,
             %(now)s - interval '5 minutes' AS t
      FROM generate_series(0, %(uploads)s - 1) AS i) AS u;
ANALYZE;
"""


def seed(url: str, n: int, uploads: int) -> float:
    import psycopg

    t0 = time.monotonic()
    params = {"now": datetime.now(UTC), "n": n, "uploads": uploads}
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"),
                         autocommit=True) as conn:
        for sql in (SEED, RUNS):
            with conn.cursor() as cur:
                for statement in sql.split(";\n"):
                    if statement.strip():
                        t1 = time.monotonic()
                        cur.execute(statement, params)
                        what = " ".join(statement.split()[:3])
                        sys.stderr.write(f"  seed {n}: {what}: "
                                         f"{time.monotonic() - t1:.1f} s\n")
        conn.execute("SELECT setval(pg_get_serial_sequence('users', 'id'), 1)")
        conn.execute("SELECT setval(pg_get_serial_sequence('projects', 'id'), 1)")
    return time.monotonic() - t0


# --- the load ----------------------------------------------------------------------------


class Answer:
    """An answer's status and body, read whole (the connection goes back to the pool)."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status_code = status
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)


#: The load's HTTP client is aiohttp's: httpx's pool costs CPU that grows with the
#: requests in flight (about 12 ms of the generator's CPU per heartbeat at 50 a second
#: with a few hundred connections), so at 3,000 nodes the generator saturated its core,
#: fell behind its schedule and measured its own queue (p50 of seconds while the
#: orchestrator's workers idled at 15 % CPU).
Client = aiohttp.ClientSession
TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError)


def client(base: str, *, connections: int, timeout_s: float) -> Client:
    return aiohttp.ClientSession(
        base_url=base, connector=aiohttp.TCPConnector(limit=connections),
        timeout=aiohttp.ClientTimeout(total=timeout_s))


async def request(c: Client, method: str, url: str, *, json_body: Any = None,
                  data: bytes | None = None, headers: dict[str, str] | None = None
                  ) -> Answer:
    """One request; sent again once if the server had just closed the idle keep-alive
    connection it went out on (uvicorn closes them after 5 s, as an agent finds too)."""
    for attempt in (0, 1):
        try:
            async with c.request(method, url, json=json_body, data=data,
                                 headers=headers) as r:
                return Answer(r.status, await r.read())
        except aiohttp.ServerDisconnectedError:
            if attempt:
                raise
    raise AssertionError("unreachable")


def heartbeat_body(i: int) -> dict[str, Any]:
    return {
        "sent_at": datetime.now(UTC).isoformat(), "disk_free_bytes": 10**10,
        "clock_offset_s": 0.001,
        "interfaces": [{"name": f"op{k}", "operator": {"mcc_mnc": mcc, "name": name},
                        "rx_bytes": 123456 * (k + 1), "tx_bytes": 654321}
                       for k, (mcc, name) in enumerate(OPERATORS)],
        "pending_run_ids": [held_id(i, j) for j in range(HELD)],
    }


class Tally:
    """What one kind of request measured: each one's latency, from send to answer, and
    how many failed (an error or an answer that is not a success)."""

    def __init__(self) -> None:
        self.lat: list[float] = []
        self.errors = 0

    async def time(self, attempt: Awaitable[bool]) -> bool:
        """Await ``attempt`` (True: it succeeded); a transport error is a failure."""
        t0 = time.monotonic()
        try:
            ok = await attempt
        except TRANSPORT_ERRORS:
            ok = False
        self.lat.append(time.monotonic() - t0)
        self.errors += not ok
        return ok


async def _ok(answer: Awaitable[Answer]) -> bool:
    return (await answer).status_code == 200


def _pct(lat: list[float], q: float) -> float:
    if not lat:
        return float("nan")
    s = sorted(lat)
    return 1e3 * s[min(len(s) - 1, int(len(s) * q))]


async def _heartbeats(base: str, n: int, seconds: float, start: float) -> dict[str, Any]:
    beats = Tally()
    late: list[float] = []
    async with client(base, connections=400, timeout_s=60) as c:
        async def beat(i: int, due: float) -> None:
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            body = heartbeat_body(i)
            late.append(time.monotonic() - due)
            await beats.time(_ok(request(
                c, "POST", "/api/v1/agent/heartbeat", json_body=body,
                headers={"Authorization": f"Bearer {node_token(i)}"})))

        tasks = []
        for b in range(int(n * seconds / 60)):
            tasks.append(asyncio.create_task(beat(b % n, start + 60.0 * b / n)))
            if len(tasks) % 500 == 0:
                await asyncio.sleep(0)
        await asyncio.gather(*tasks)
    return {"lat": beats.lat, "late": late, "errors": beats.errors, "n": len(beats.lat)}


async def _readers(c: Client, end: float
                   ) -> tuple[list[float], int, dict[str, list[float]]]:
    pages = Tally()
    by_path: dict[str, list[float]] = {p: [] for p in PAGES}

    async def reader(r: int) -> None:
        await asyncio.sleep(READER_PAUSE_S * r / READERS)  # spread, as people arrive
        k = r
        while time.monotonic() < end:
            path = PAGES[k % len(PAGES)]
            await pages.time(_ok(request(c, "GET", path,
                                         headers={"Authorization": f"Bearer {ADMIN}"})))
            by_path[path].append(pages.lat[-1])
            k += 1
            await asyncio.sleep(READER_PAUSE_S)

    await asyncio.gather(*(reader(r) for r in range(READERS)))
    return pages.lat, pages.errors, by_path


def bundles(tmp: Path, count: int) -> list[bytes]:
    from testbed_common.bundle import build_bundle

    out = []
    for i in range(count):
        root = tmp / f"bundle-{i}"
        (root / "results").mkdir(parents=True)
        (root / "results" / "tat.json").write_text(json.dumps({"format": "testbed.tat"}))
        (root / "results" / "capture.bin").write_bytes(os.urandom(BUNDLE_PAYLOAD))
        out.append(build_bundle(root, run_id=f"b{i:05d}u", node_id=node_id(i)))
    return out


async def _uploads(c: Client, data: list[bytes], start: float
                   ) -> tuple[list[float], int, int]:
    uploads = Tally()
    sent = 0

    async def upload(i: int) -> None:
        nonlocal sent
        await asyncio.sleep(max(0.0, start + 60.0 * i / UPLOADS_PER_MIN - time.monotonic()))
        url = f"/api/v1/agent/runs/b{i:05d}u/bundle"
        auth = {"Authorization": f"Bearer {node_token(i)}"}
        blob = data[i]
        if await uploads.time(_send(c, url, auth, blob)):
            sent += len(blob)

    await asyncio.gather(*(upload(i) for i in range(len(data))))
    return uploads.lat, uploads.errors, sent


async def _send(c: Client, url: str, auth: dict[str, str], blob: bytes) -> bool:
    """Declare the bundle, then send it in chunks from the offset the server holds."""
    r = await request(c, "POST", url, headers=auth, json_body={
        "size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()})
    offset = r.json().get("offset", 0) if r.status_code == 200 else len(blob)
    while offset < len(blob) and r.status_code == 200:
        r = await request(c, "PATCH", url, data=blob[offset:offset + CHUNK], headers={
            **auth, "Upload-Offset": str(offset),
            "Content-Type": "application/offset+octet-stream"})
        offset = r.json().get("offset", len(blob)) if r.status_code == 200 else offset
    return r.status_code == 200 and r.json().get("complete") is True


async def _healthz(c: Client, start: float, end: float) -> list[float]:
    probes = Tally()  # a failed probe is counted by the time it waited, as any other

    async def probe(due: float) -> None:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        await probes.time(_ok(request(c, "GET", "/healthz")))

    count = int((end - start) * HEALTHZ_PER_S)
    await asyncio.gather(*(probe(start + k / HEALTHZ_PER_S) for k in range(count)))
    return probes.lat


async def _scrapes(c: Client, start: float, end: float, interval_s: float
                   ) -> tuple[list[float], int, int]:
    """Prometheus's scrapes of the full view: their latencies, failures and the last
    body's size."""
    scrapes = Tally()
    size = 0

    async def scrape(due: float) -> None:
        nonlocal size
        await asyncio.sleep(max(0.0, due - time.monotonic()))

        async def fetch() -> bool:
            nonlocal size
            r = await request(c, "GET", "/metrics",
                              headers={"Authorization": f"Bearer {METRICS}"})
            size = len(r.body)
            return r.status_code == 200

        await scrapes.time(fetch())

    if interval_s <= 0:
        return [], 0, 0
    count = max(0, int((end - start - interval_s / 4) // interval_s) + 1)
    await asyncio.gather(*(scrape(start + interval_s / 4 + k * interval_s)
                           for k in range(count)))
    return scrapes.lat, scrapes.errors, size


async def _others(base: str, seconds: float, start: float, tmp: Path, scrape_s: float
                  ) -> dict[str, Any]:
    data = bundles(tmp, int(UPLOADS_PER_MIN * seconds / 60))
    end = start + seconds
    async with client(base, connections=100, timeout_s=120) as c:
        (pages, page_errors, by_path), (up, up_errors, up_bytes), health, scraped = (
            await asyncio.gather(_readers(c, end), _uploads(c, data, start),
                                 _healthz(c, start, end), _scrapes(c, start, end, scrape_s)))
    return {"pages": pages, "page_errors": page_errors, "by_path": by_path, "uploads": up,
            "upload_errors": up_errors, "upload_bytes": up_bytes, "healthz": health,
            "scrapes": scraped[0], "scrape_errors": scraped[1], "scrape_bytes": scraped[2]}


def _generator(role: str, base: str, n: int, seconds: float, start: float, tmp: str,
               scrape_s: float, out: Any) -> None:
    if role == "heartbeats":
        out.put((role, asyncio.run(_heartbeats(base, n, seconds, start))))
    else:
        out.put((role, asyncio.run(_others(base, seconds, start, Path(tmp), scrape_s))))


# --- one size ----------------------------------------------------------------------------


def _serve(url: str, tmp: Path, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    from tests.integration.live import free_port

    port = free_port()
    env = {**os.environ,
           "TESTBED_ENVIRONMENT": "development", "TESTBED_ADMIN_TOKEN": ADMIN,
           "TESTBED_METRICS_TOKEN": METRICS, "TESTBED_DATABASE_URL": url, "TESTBED_ARCHIVE_DIR": str(tmp / "archive"),
           "TESTBED_UPLOAD_DIR": str(tmp / "uploads"),
           "TESTBED_EXPERIMENTS_DIR": str(REPO / "experiments"),
           "TESTBED_HOST": "127.0.0.1", "TESTBED_PORT": str(port),
           "TESTBED_WORKERS": str(workers)}
    log = (tmp / "orchestrator.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli.main", "serve"],
                            env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            raise RuntimeError((tmp / "orchestrator.log").read_text())
        time.sleep(0.2)
    time.sleep(2.0)  # every worker up, not only the first
    return proc, base


def one(n: int) -> dict[str, Any]:
    from orchestrator.store.migrate import upgrade
    from tests.integration import postgres

    ap = argparse.ArgumentParser()
    _arguments(ap)
    args, _ = ap.parse_known_args()
    uploads = int(UPLOADS_PER_MIN * args.seconds / 60)
    with tempfile.TemporaryDirectory() as tmp_s, postgres.server() as template:
        tmp = Path(tmp_s)
        url = postgres.create_database(template, "bench")
        upgrade(url)
        seeded = seed(url, n, uploads)
        proc, base = _serve(url, tmp, args.workers)
        sys.stderr.write(f"# {n} nodes: seeded in {seeded:.1f} s\n")
        try:
            uptime_before = _uptime()
            load_before = os.getloadavg()[0]
            start = time.monotonic() + 5.0
            out: Any = mp.get_context("fork").Queue()
            gens = [mp.get_context("fork").Process(
                target=_generator, args=(role, base, n, args.seconds, start, tmp_s,
                                     args.scrape_s, out))
                for role in ("heartbeats", "others")]
            for g in gens:
                g.start()
            got = dict(out.get(timeout=args.seconds + 600) for _ in gens)
            for g in gens:
                g.join()
            load_after = os.getloadavg()[0]
            uptime_after = _uptime()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
            errors = [line for line in (tmp / "orchestrator.log").read_text().splitlines()
                      if "Error" in line or "Traceback" in line]
            sys.stderr.write(f"orchestrator log: {len(errors)} error lines\n"
                             + "\n".join(errors[:20]) + "\n")
    hb, other = got["heartbeats"], got["others"]
    seconds = args.seconds
    hz = other["healthz"]
    row = {
        "nodes": n, "workers": args.workers, "seconds": seconds, "seed_s": seeded,
        "hb_per_s": hb["n"] / seconds, "hb_p50": _pct(hb["lat"], 0.5),
        "hb_p99": _pct(hb["lat"], 0.99), "hb_max": _pct(hb["lat"], 1.0),
        "hb_errors": hb["errors"], "late_p99": _pct(hb["late"], 0.99),
        "healthz_p50": _pct(hz, 0.5), "healthz_p99": _pct(hz, 0.99),
        "pages": len(other["pages"]), "pages_p50": _pct(other["pages"], 0.5),
        "pages_p99": _pct(other["pages"], 0.99), "page_errors": other["page_errors"],
        "uploads_per_s": (len(other["uploads"]) - other["upload_errors"]) / seconds,
        "upload_mb_per_s": other["upload_bytes"] / seconds / 1e6,
        "upload_p99": _pct(other["uploads"], 0.99), "upload_errors": other["upload_errors"],
        "scrape_s": args.scrape_s, "scrapes": len(other["scrapes"]),
        "scrape_max": _pct(other["scrapes"], 1.0), "scrape_errors": other["scrape_errors"],
        "scrape_mb": other["scrape_bytes"] / 1e6,
        "load_before": load_before, "load_after": load_after,
        "uptime_before": uptime_before, "uptime_after": uptime_after,
        "pages_p99_by_path": {p: _pct(lat, 0.99) for p, lat in other["by_path"].items()},
        "pages_n_by_path": {p: len(lat) for p, lat in other["by_path"].items()},
        "at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    sys.stderr.write(f"# {n} nodes measured:\n{HEADER}\n{table_row(row)}\n"
                     f"#   uptime before: {uptime_before}\n#   uptime after:  {uptime_after}\n"
                     f"#   pages p99 by path (n): " + ", ".join(
                         f"{p} {row['pages_p99_by_path'][p]:.0f} ms "
                         f"({row['pages_n_by_path'][p]})" for p in PAGES) + "\n")
    if args.save:
        with open(args.save, "a") as f:
            f.write(json.dumps(row) + "\n")
    return row


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--seconds", type=float, default=90.0, help="measured time per size")
    ap.add_argument("--workers", type=int, default=2, help="uvicorn workers")
    ap.add_argument("--scrape-s", type=float, default=60.0,
                    help="seconds between scrapes of /metrics with the metrics token "
                         "(0: none)")
    ap.add_argument("--save", help="append each size's figures (JSON) to this file")
    ap.add_argument("--table", help="only print the table of the figures kept in this file")


HEADER = (
    "| nodes | seeded s | heartbeats/s | heartbeat p50 ms | heartbeat p99 ms | "
    "/healthz p50 ms | /healthz p99 ms | p99 ratio heartbeat / healthz | pages p99 ms (n) | "
    "uploads/s (MB/s) | upload p99 ms | generator late p99 ms | errors hb/pages/uploads | "
    "/metrics scrapes: every s, n, slowest ms (MB) | load 1-min before, after |\n"
    "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
    ":---: | ---: | ---: |")


def table_row(r: dict[str, Any]) -> str:
    return (f"| {r['nodes']} | {r['seed_s']:.1f} | {r['hb_per_s']:.1f} | {r['hb_p50']:.1f} | "
            f"{r['hb_p99']:.1f} | {r['healthz_p50']:.1f} | {r['healthz_p99']:.1f} | "
            f"{r['hb_p99'] / r['healthz_p99']:.2f} | {r['pages_p99']:.0f} ({r['pages']}) | "
            f"{r['uploads_per_s']:.2f} ({r['upload_mb_per_s']:.2f}) | "
            f"{r['upload_p99']:.0f} | {r['late_p99']:.1f} | "
            f"{r['hb_errors']}/{r['page_errors']}/{r['upload_errors']} | {_scraped(r)} | "
            f"{r['load_before']:.2f}, {r['load_after']:.2f} |")


def _scraped(r: dict[str, Any]) -> str:
    """The scrapes' cell: none (rows kept from before the bench scraped, or
    ``--scrape-s 0``), else the interval, how many, the slowest and the body's size,
    with the failures if any."""
    if not r.get("scrapes"):
        return "none"
    failed = f", {r['scrape_errors']} failed" if r["scrape_errors"] else ""
    return (f"{r['scrape_s']:.0f}, {r['scrapes']}, {r['scrape_max']:.0f} "
            f"({r['scrape_mb']:.1f}){failed}")


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"# load bench, {os.cpu_count()} cores, {rows[0]['workers']} uvicorn workers, "
          f"{rows[0]['seconds']:.0f} s per size")
    print(HEADER)
    for r in sorted(rows, key=lambda r: r["nodes"]):
        print(table_row(r))
    first, last = min(rows, key=lambda r: r["nodes"]), max(rows, key=lambda r: r["nodes"])
    if first is not last:
        print(f"\nheartbeat p99 at {last['nodes']} / at {first['nodes']} nodes: "
              f"{last['hb_p99'] / first['hb_p99']:.2f}; p50: "
              f"{last['hb_p50'] / first['hb_p50']:.2f}")
    for r in sorted(rows, key=lambda r: r["nodes"]):
        print(f"\n{r['nodes']} nodes, measured {r.get('at', '?')}:\n"
              f"  uptime before: {r.get('uptime_before', '?')}\n"
              f"  uptime after:  {r.get('uptime_after', '?')}\n  pages p99 by path (n): "
              + ", ".join(f"{p} {ms:.0f} ms ({r['pages_n_by_path'][p]})"
                          for p, ms in r.get("pages_p99_by_path", {}).items()))


def main() -> None:
    ap = argparse.ArgumentParser()
    _arguments(ap)
    early, _ = ap.parse_known_args()
    if early.table:
        with open(early.table) as f:
            print_table([json.loads(line) for line in f if line.strip()])
        return
    measured = per_size(__doc__ or "", __file__, one, add_arguments=_arguments)
    if measured is None:
        return
    rows, _args = measured
    print_table(rows)
    print("raw figures: " + json.dumps(rows))


if __name__ == "__main__":
    main()
