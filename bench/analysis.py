"""Bench: capture analysis speed against tshark, and InfluxDB write rate.

    sudo .venv/bin/python bench/analysis.py [--rate 40mbit] [--seconds 10] [--points 100000]

1. Records a real capture in a temp folder (tests/unit/fixtures/record-iperf3-pcap.sh:
   iperf3 through a tbf bottleneck between network namespaces, headers only, snaplen
   96), so nothing big is committed. Without root it repeats the committed fixture with
   shifted timestamps instead, and says so.
2. Times, best of 3, on the same file: ``tshark -r f -q -z io,stat,0.1`` (frames and
   bytes per 100 ms), our reader doing the same binning (and checks the bins equal
   tshark's), and our full per-flow analysis (:func:`analyse_capture`). Reports
   packets/s and the ratio to tshark.
3. Starts a throwaway influxd (tests/integration/influxd.py) and writes ``--points`` TAT
   points with a run's tags through :class:`InfluxClient` at two batch sizes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.analysis.flows import analyse_capture  # noqa: E402
from orchestrator.analysis.pcap import iter_frames, read_capture  # noqa: E402
from orchestrator.timeseries.influx import InfluxClient  # noqa: E402
from orchestrator.timeseries.schema import TAT, RunContext, point  # noqa: E402
from tests.integration import influxd  # noqa: E402

RECORDER = ROOT / "tests/unit/fixtures/record-iperf3-pcap.sh"
FIXTURE = ROOT / "tests/unit/fixtures/tcp-6mbit-rx.pcap"
BIN_NS = 100_000_000


def best_of(n: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def make_capture(folder: Path, rate: str, seconds: int) -> tuple[Path, str]:
    if os.geteuid() == 0 and shutil.which("iperf3") and shutil.which("tcpdump"):
        subprocess.run(["sh", str(RECORDER), str(folder), rate, str(seconds), "96"],
                       check=True, capture_output=True)
        return folder / "iperf3-rx.pcap", f"recorded: iperf3 {seconds} s through tbf {rate}"
    data = FIXTURE.read_bytes()
    frames = list(iter_frames(data))
    span = frames[-1].ts_ns - frames[0].ts_ns + BIN_NS
    out = bytearray(data[:24])
    copies = 30
    for k in range(copies):
        for f in frames:
            ts = f.ts_ns + k * span
            out += struct.pack("<IIII", ts // 10**9, ts % 10**9 // 1000, f.caplen, f.orig_len)
            out += data[f.start : f.start + f.caplen]
    path = folder / "repeated.pcap"
    path.write_bytes(bytes(out))
    return path, f"not root: the 3 s fixture repeated {copies} times"


def our_io_stat(data: bytes) -> list[tuple[int, int]]:
    """What ``-z io,stat,0.1`` prints: frames and frame bytes per 100 ms from the first."""
    bins: list[list[int]] = []
    t0 = None
    for f in iter_frames(data):
        if t0 is None:
            t0 = f.ts_ns
        i = (f.ts_ns - t0) // BIN_NS
        while len(bins) <= i:
            bins.append([0, 0])
        bins[i][0] += 1
        bins[i][1] += f.orig_len
    return [(a, b) for a, b in bins]


def tshark_io_stat(path: Path) -> list[tuple[int, int]]:
    out = subprocess.run(["tshark", "-r", str(path), "-q", "-z", "io,stat,0.1"],
                         check=True, capture_output=True, text=True).stdout
    rows = re.findall(r"\|\s*[\d.]+\s*<>\s*[\d.Dur]+\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|", out)
    return [(int(a), int(b)) for a, b in rows]


def bench_capture(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="an-bench-") as tmp:
        path, origin = make_capture(Path(tmp), args.rate, args.seconds)
        data = path.read_bytes()
        n = sum(1 for _ in iter_frames(data))
        print(f"capture: {origin}; {n} packets, {len(data) / 1e6:.1f} MB, snaplen 96\n")
        ours = our_io_stat(data)
        theirs = tshark_io_stat(path)
        same = ours == theirs[: len(ours)] and all(r == (0, 0) for r in theirs[len(ours):])
        t_tshark = best_of(3, lambda: tshark_io_stat(path))
        first = next(iter_frames(data))
        tiny = Path(tmp) / "one-packet.pcap"
        tiny.write_bytes(data[: first.start + first.caplen])
        t_start = best_of(3, lambda: tshark_io_stat(tiny))
        t_bins = best_of(3, lambda: our_io_stat(data))
        t_read = best_of(3, lambda: read_capture(data))
        t_flows = best_of(3, lambda: analyse_capture(read_capture(data).packets))
        print("| task (best of 3) | time, s | packets/s | vs tshark |")
        print("| --- | ---: | ---: | ---: |")
        for name, t in (
            ("tshark -q -z io,stat,0.1 (process start included)", t_tshark),
            ("ours: frames + bytes per 100 ms (same table)", t_bins),
            ("ours: read + decode IP/TCP headers", t_read),
            ("ours: read + decode + per-flow analysis", t_flows),
        ):
            print(f"| {name} | {t:.3f} | {n / t:,.0f} | {t_tshark / t:.2f}x |")
        marginal = t_tshark - t_start
        print(f"| tshark start-up alone (a 1-packet file) | {t_start:.3f} | | |")
        print(f"| tshark less its start-up | {marginal:.3f} | {n / marginal:,.0f} | 1.00x |")
        print(f"| ours: per-flow analysis against that | {t_flows:.3f} | {n / t_flows:,.0f} "
              f"| {marginal / t_flows:.2f}x |")
        print(f"\n100 ms bins identical to tshark's: {same} ({len(ours)} bins)\n")


def bench_influx(args: argparse.Namespace) -> None:
    if influxd.available() is not None:
        print(f"InfluxDB: skipped ({influxd.available()})")
        return
    ctx = RunContext(node="se-01", country="SE", operator="240-01", operator_name="Telia",
                     interface="op0", rat="4G", experiment="tat", campaign="bench", run="r1")
    t0 = 1_795_312_800 * 10**9
    points = [point(TAT, ctx, {"bps": 1e6 + i, "bytes": i, "duration_s": 0.1},
                    t0 + i * BIN_NS, direction="uplink") for i in range(args.points)]
    print("| InfluxDB 1.6.7 write (one client, localhost) | points | time, s | points/s |")
    print("| --- | ---: | ---: | ---: |")
    with influxd.running() as server:
        for batch in (5000, 1000):
            with InfluxClient(server.url, f"bench{batch}", batch_size=batch) as c:
                c.create_database()
                t = time.perf_counter()
                c.write(points)
                dt = time.perf_counter() - t
                [s] = c.query("SELECT count(bps) FROM tat")
                assert s.rows()[0]["count"] == len(points)
            print(f"| batch {batch} | {len(points)} | {dt:.2f} | {len(points) / dt:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", default="40mbit")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--points", type=int, default=100_000)
    args = parser.parse_args()
    bench_capture(args)
    bench_influx(args)


if __name__ == "__main__":
    main()
