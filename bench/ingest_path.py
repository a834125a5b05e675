"""Bench: the whole ingest path (upload, verify, archive, analyse, write to InfluxDB) at
one and at two orchestrator processes, against upload-and-archive alone in the same run.

    sudo .venv/bin/python bench/ingest_path.py [--bundles 48] [--uploaders 4]
                                               [--captures DIR]

Needs the PostgreSQL server binaries and influxd (Debian's postgresql and influxdb, as
the integration tests), the compiled analysis (cd tools && cargo build --release -p
flows), and to record the captures: root, iproute2, tc, tcpdump and iperf3.

1. Realistic bundles: a 20 s TAT at 20 Mbit/s recorded for real with the project's own
   recorder (tests/unit/fixtures/record-iperf3-pcap.sh: iperf3 through a tbf
   bottleneck between network namespaces, tcpdump headers only, snaplen 96), once per
   bench run (or taken from ``--captures``, a folder the recorder wrote). Each run's
   bundle is what an agent uploads for a downlink TAT with both captures:
   results/tat.json (the tat experiment's parser, testbed_kit.tat_result, on the recorded iperf3 report,
   200 bins of 100 ms), results/capture/op0.pcap (the receiver's capture: the node's
   side), server/capture/op0.pcap (the sender's: the server's side), the captures'
   meta documents, system samples and an agent log. Bundles are built before the clock
   starts (the node builds them, not the orchestrator).
2. A real PostgreSQL (tests/integration/postgres.py), a real influxd
   (tests/integration/influxd.py) behind a counting proxy in this process, and real
   orchestrator processes (``testbed serve``: uvicorn) sharing the database and the
   archive folder, as replicas do. Each phase has a database and archive of its own;
   its runs are submitted, handed out and set uploading through the API before the
   clock starts.
3. Four phases, each timed from the first upload to the last bundle archived (ingest
   off: no InfluxDB URL) or to the last run written (ingest on; polled in the
   database): one process, then two, each with ingest off and on. Uploads go round
   robin to the processes, ``--uploaders`` at a time.
4. The proxy counts the points of every write per run: each run must have points, and
   no point may be written twice (the same line protocol line sent again), which is
   what a run ingested twice would do.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.services.flowtool import find_tool  # noqa: E402
from orchestrator.store.migrate import upgrade  # noqa: E402
from testbed_common import wire  # noqa: E402
from testbed_common.bundle import build_bundle  # noqa: E402
from testbed_kit.tat_result import parse_iperf3  # noqa: E402
from tests.integration import influxd, postgres  # noqa: E402
from tests.integration.live import ADMIN_TOKEN, orchestrator  # noqa: E402

RECORDER = REPO / "tests/unit/fixtures/record-iperf3-pcap.sh"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
RUN_TAG = re.compile(rb",run=([^,\s]+)")


# -- the bundles -------------------------------------------------------------------------

def record(folder: Path) -> Path:
    """A 20 s, 20 Mbit/s transfer recorded with the project's recorder."""
    missing = [t for t in ("iperf3", "tcpdump", "tc", "ip") if shutil.which(t) is None]
    if os.geteuid() != 0 or missing:
        sys.exit(f"recording the captures needs root and {', '.join(missing) or 'nothing more'}"
                 " (apt-get install iperf3 tcpdump iproute2), or pass --captures DIR")
    subprocess.run(["sh", str(RECORDER), str(folder), "20mbit", "20", "96"], check=True,
                   capture_output=True)
    return folder


def tat_json(captures: Path) -> dict[str, Any]:
    raw = json.loads((captures / "iperf3.json").read_text())
    return parse_iperf3(raw, direction="downlink", interface="op0", server="10.77.1.1",
                        port=5201)


def bundle_folder(root: Path, captures: Path) -> Path:
    """A run directory as the agent leaves it, less the run's own tat.json."""
    (root / "results" / "capture").mkdir(parents=True)
    (root / "server" / "capture").mkdir(parents=True)
    (root / "meta").mkdir()
    (root / "logs").mkdir()
    shutil.copy(captures / "iperf3-rx.pcap", root / "results" / "capture" / "op0.pcap")
    shutil.copy(captures / "iperf3-tx.pcap", root / "server" / "capture" / "op0.pcap")
    (root / "meta" / "capture.json").write_text(json.dumps(
        {"interface": "op0", "snaplen": 96, "packets": 0, "dropped": 0}))
    (root / "meta" / "server-capture.json").write_text(json.dumps(
        {"format": "testbed.server-capture", "version": 1, "interface": "op0"}))
    start = datetime.now(UTC)
    (root / "meta" / "system.jsonl").write_text("".join(json.dumps(
        {"time": (start + timedelta(seconds=5 * k)).isoformat(), "cpu_pct": 30.0 + k,
         "mem_pct": 41.0, "temperature_c": 48.0, "disk_free_bytes": 5 * 10**9}) + "\n"
        for k in range(5)))
    (root / "logs" / "agent.txt").write_text("run started\nexperiment exited 0\n" * 20)
    return root


def make_bundle(folder: Path, tat: dict[str, Any], run_id: str, node: str) -> bytes:
    """The run's bundle as the agent builds it (gzip level 9: seconds each, so the bench
    builds them in a process pool, before the clock starts)."""
    mine = folder.parent / f"bundle-{run_id}"
    shutil.copytree(folder, mine)
    doc = {**tat, "start": datetime.now(UTC).isoformat()}
    (mine / "results" / "tat.json").write_text(json.dumps(doc))
    data = build_bundle(mine, run_id=run_id, node_id=node)
    shutil.rmtree(mine)
    return data


# -- the counting proxy ------------------------------------------------------------------

class WriteCount:
    """Points per run, and points sent again (the same line twice)."""

    def __init__(self) -> None:
        self.points: Counter[str] = Counter()
        self.again: Counter[str] = Counter()
        self._seen: set[bytes] = set()
        self._lock = threading.Lock()

    def add(self, body: bytes) -> None:
        for line in body.splitlines():
            m = RUN_TAG.search(line)
            run = m.group(1).decode() if m else ""
            key = hashlib.blake2b(line, digest_size=16).digest()
            with self._lock:
                if key in self._seen:
                    self.again[run] += 1
                else:
                    self._seen.add(key)
                    self.points[run] += 1


def proxy(upstream_port: int, count: WriteCount) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.startswith("/write"):
                count.add(body)
            conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=60)
            conn.request(self.command, self.path, body=body,
                         headers={k: v for k, v in self.headers.items()
                                  if k.lower() in ("content-type", "authorization")})
            r = conn.getresponse()
            data = r.read()
            self.send_response(r.status)
            for k, v in r.getheaders():
                if k.lower() in ("content-type", "x-influxdb-error"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            conn.close()

        do_GET = do_POST = _forward

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# -- a phase -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Phase:
    processes: int
    ingest: bool
    bundles: int
    seconds: float
    bytes_uploaded: int

    @property
    def per_minute(self) -> float:
        return self.bundles / self.seconds * 60


def prepare(url: str, n: int, tag: str) -> list[tuple[str, str, str]]:
    """``n`` runs, each on a node of its own, handed out and set uploading: (run, node,
    node token)."""
    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(lambda i: prepare_one(url, f"{tag}-{i:03d}"), range(n)))


def prepare_one(url: str, node: str) -> tuple[str, str, str]:
    with httpx.Client(base_url=url, timeout=60) as c:
        r = c.post("/api/v1/nodes", headers=ADMIN, json={"id": node, "country": "SE"})
        r.raise_for_status()
        auth = {"Authorization": f"Bearer {r.json()['token']}"}
        reg = wire.Registration(agent_version="bench", interfaces=[wire.InterfaceReport(
            name="op0", operator=wire.Operator(mcc_mnc="240-01", name="Telia"))])
        c.post(f"{wire.AGENT_PREFIX}/register", headers=auth,
               json=reg.model_dump(mode="json")).raise_for_status()
        r = c.post("/api/v1/runs", headers=ADMIN, json={
            "experiment": "tat", "node": node, "interface": "op0",
            "parameters": {"duration_s": 20}})
        r.raise_for_status()
        run = r.json()["id"]
        hb = wire.Heartbeat(sent_at=datetime.now(UTC), interfaces=[],
                            disk_free_bytes=10**9)
        c.post(f"{wire.AGENT_PREFIX}/heartbeat", headers=auth,
               json=hb.model_dump(mode="json")).raise_for_status()
        for state in ("running", "uploading"):
            c.post(f"{wire.AGENT_PREFIX}/runs/{run}/state", headers=auth, json={
                "state": state, "reason": "bench", "at": datetime.now(UTC).isoformat()},
            ).raise_for_status()
        return run, node, auth["Authorization"]


def upload(url: str, run: str, auth: str, data: bytes) -> None:
    path = f"{url}{wire.AGENT_PREFIX}/runs/{run}/bundle"
    headers = {"Authorization": auth}
    with httpx.Client(timeout=120) as c:
        c.post(path, headers=headers, json={
            "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}).raise_for_status()
        r = c.patch(path, content=data,
                    headers={**headers, wire.UPLOAD_OFFSET_HEADER: "0"})
        r.raise_for_status()
        if not r.json().get("complete"):
            raise RuntimeError(f"run {run}: upload not complete: {r.text}")


def ingested(db_url: str, runs: list[str]) -> int:
    dsn = db_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM runs WHERE id = ANY(%s) AND ingested_at "
                           "IS NOT NULL", (runs,)).fetchone()
    return int(row[0]) if row else 0


def run_phase(work: Path, pg: str, influx_url: str | None, processes: int, n: int,
              uploaders: int, captures: Path, tat: dict[str, Any],
              count: WriteCount | None, timeout_s: float,
              store: influxd.Influxd | None = None) -> Phase:
    tag = f"p{processes}{'i' if influx_url else 'a'}"
    root = work / tag
    db_url = postgres.create_database(pg, f"bench_{tag}_{uuid.uuid4().hex[:6]}")
    upgrade(db_url)  # once, before the processes start (each would migrate at start)
    env = {"TESTBED_DATABASE_URL": db_url,
           "TESTBED_ARCHIVE_DIR": str(root / "archive"),
           "TESTBED_UPLOAD_DIR": str(root / "uploads"),
           "TESTBED_INFLUX__DATABASE": f"bench_{tag}",
           "TESTBED_INFLUX__INGEST_INTERVAL_S": "0.5"}
    if influx_url:
        assert store is not None
        writer, reader = store.provision(f"bench_{tag}")  # the users a deployment has
        env |= {"TESTBED_INFLUX__URL": influx_url,
                "TESTBED_INFLUX__WRITER__USERNAME": writer.username,
                "TESTBED_INFLUX__WRITER__PASSWORD": writer.password,
                "TESTBED_INFLUX__READER__USERNAME": reader.username,
                "TESTBED_INFLUX__READER__PASSWORD": reader.password}
    with ExitStack() as stack:
        lives = []
        for i in range(processes):
            (root / f"process-{i}").mkdir(parents=True)
            lives.append(stack.enter_context(orchestrator(root / f"process-{i}", **env)))
        runs = prepare(lives[0].url, n, tag)
        folder = bundle_folder(root / "bundle", captures)
        with ProcessPoolExecutor(os.cpu_count()) as builders:
            bundles = list(builders.map(make_bundle, [folder] * n, [tat] * n,
                                        [r for r, _, _ in runs], [nd for _, nd, _ in runs]))
        t0 = time.perf_counter()
        with ThreadPoolExecutor(uploaders) as pool:
            list(pool.map(lambda k: upload(lives[k % processes].url, runs[k][0], runs[k][2],
                                           bundles[k]), range(n)))
        seconds = time.perf_counter() - t0
        if influx_url:
            ids = [r for r, _, _ in runs]
            while (done := ingested(db_url, ids)) < n:
                if time.perf_counter() - t0 > timeout_s:
                    sys.exit(f"{tag}: only {done} of {n} runs written after {timeout_s} s; "
                             f"see {root}/process-*/orchestrator.log")
                time.sleep(0.1)
            seconds = time.perf_counter() - t0
            assert count is not None
            unwritten = [r for r in ids if count.points[r] == 0]
            twice = {r: count.again[r] for r in ids if count.again[r]}
            if unwritten or twice:
                sys.exit(f"{tag}: runs with no points: {unwritten}; points written again: "
                         f"{twice}")
    return Phase(processes, bool(influx_url), n, seconds, sum(map(len, bundles)))


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundles", type=int, default=48)
    ap.add_argument("--uploaders", type=int, default=4)
    ap.add_argument("--captures", type=Path, help="a folder the recorder wrote")
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    for why in (postgres.available(), influxd.available()):
        if why:
            sys.exit(why)
    if find_tool() is None:
        sys.exit("testbed-flows not built: cd tools && cargo build --release -p flows")
    print(f"load before: {uptime()}")
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        captures = args.captures or record(work / "captures")
        tat = tat_json(captures)
        sizes = {p: (captures / p).stat().st_size for p in ("iperf3-rx.pcap", "iperf3-tx.pcap")}
        print(f"captures ({'given' if args.captures else 'recorded'}): node side "
              f"{sizes['iperf3-rx.pcap']:,} B, server side {sizes['iperf3-tx.pcap']:,} B; "
              f"tat.json {len(tat['bins']) if 'bins' in tat else '?'} bins")
        count = WriteCount()
        with postgres.server() as pg, influxd.running() as store:
            front = proxy(store.port, count)
            influx_url = f"http://127.0.0.1:{front.server_address[1]}"
            phases = []
            for processes in (1, 2):
                for ingest in (False, True):
                    p = run_phase(work, pg, influx_url if ingest else None, processes,
                                  args.bundles, args.uploaders, captures, tat,
                                  count if ingest else None, args.timeout, store)
                    phases.append(p)
                    print(f"{processes} process(es), {'full path      ' if ingest else 'upload+archive '}"
                          f"{p.bundles} bundles ({p.bytes_uploaded / p.bundles / 1e6:.2f} MB "
                          f"each) in {p.seconds:6.1f} s: {p.per_minute:6.1f} bundles/min",
                          flush=True)
            front.shutdown()
    print(f"load after: {uptime()}")
    base = {p.processes: p for p in phases if not p.ingest}
    full = {p.processes: p for p in phases if p.ingest}
    print("\n| processes | upload+archive, bundles/min | full path, bundles/min | "
          "full / upload+archive |")
    print("| ---: | ---: | ---: | ---: |")
    for k in (1, 2):
        print(f"| {k} | {base[k].per_minute:.1f} | {full[k].per_minute:.1f} | "
              f"{full[k].per_minute / base[k].per_minute:.2f} |")
    print(f"\ntwo processes / one, full path: {full[2].per_minute / full[1].per_minute:.2f}")
    print(f"points written: {sum(v for r, v in count.points.items() if r):,} over "
          f"{sum(1 for r in count.points if r)} runs; points written again: "
          f"{sum(count.again.values())}")


if __name__ == "__main__":
    main()
