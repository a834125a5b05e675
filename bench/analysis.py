"""Bench: capture analysis speed against tshark, memory on a 2 GB capture, InfluxDB write rate.

    sudo .venv/bin/python bench/analysis.py [--rate 40mbit] [--seconds 10] [--points 100000]
                                            [--big-gb 2] [--skip-influx]

Needs tshark (apt-get install tshark; the bench only, not the tests) and the compiled
analysis (cd tools && cargo build --release -p flows, or $TESTBED_FLOWS_BIN).

1. Records a real capture in a temp folder (tests/unit/fixtures/record-iperf3-pcap.sh:
   iperf3 through a tbf bottleneck between network namespaces, headers only, snaplen
   96), so nothing big is committed. Without root it repeats the committed fixture with
   shifted timestamps instead, and says so.
2. Times, best of 3, on the same file: ``tshark -r f -q -z io,stat,0.1`` (frames and
   bytes per 100 ms), our reader doing the same binning (and checks the bins equal
   tshark's), and the full per-flow analysis two ways: the pure-Python reference
   (:func:`analyse_capture`) and the compiled ``testbed-flows`` as ingest runs it
   (process start and JSON decoding included), and checks both give identical figures.
   Reports packets/s and the ratios to tshark's marginal rate (less its start-up).
3. Writes a ``--big-gb`` capture in the temp folder (the bench capture repeated, each
   copy moved on in time and onto its own ports, so each is a connection of its own)
   and runs ``testbed-flows`` on it, reporting its peak RSS (GNU time's ``%M``: apt-get
   install time), its rate, and
   the peak RSS of a fresh Python process that calls it as ingest does.
4. Starts a throwaway influxd (tests/integration/influxd.py) and writes ``--points`` TAT
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

from orchestrator.analysis.capture import reference_flows  # noqa: E402
from orchestrator.analysis.flows import analyse_capture  # noqa: E402
from orchestrator.analysis.packets import decode  # noqa: E402
from orchestrator.analysis.pcap import iter_frames, read_capture  # noqa: E402
from orchestrator.services.flowtool import analyse_file, find_tool  # noqa: E402
from orchestrator.timeseries.schema import RunContext, point  # noqa: E402
from studies.tat.points import TAT  # noqa: E402
from tests.integration import influxd  # noqa: E402

RECORDER = ROOT / "tests/unit/fixtures/record-iperf3-pcap.sh"
FIXTURE = ROOT / "tests/unit/fixtures/tcp-6mbit-rx.pcap"
BIN_NS = 100_000_000
TIME = "/usr/bin/time"  # GNU time, for the tool's own peak RSS


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


def bench_capture(args: argparse.Namespace, tmp: Path) -> Path:
    path, origin = make_capture(tmp, args.rate, args.seconds)
    data = path.read_bytes()
    n = sum(1 for _ in iter_frames(data))
    print(f"capture: {origin}; {n} packets, {len(data) / 1e6:.1f} MB, snaplen 96\n")
    tool = find_tool()
    if tool is None:
        sys.exit("testbed-flows not found: cd tools && cargo build --release -p flows")
    ours = our_io_stat(data)
    theirs = tshark_io_stat(path)
    same = ours == theirs[: len(ours)] and all(r == (0, 0) for r in theirs[len(ours):])
    reference = reference_flows(data)
    native = analyse_file(path, tool=tool)
    identical = (native.flows == reference.flows and native.frames == reference.frames
                 and native.damage is None and reference.damage is None)
    t_tshark = best_of(3, lambda: tshark_io_stat(path))
    first = next(iter_frames(data))
    tiny = tmp / "one-packet.pcap"
    tiny.write_bytes(data[: first.start + first.caplen])
    t_start = best_of(3, lambda: tshark_io_stat(tiny))
    t_bins = best_of(3, lambda: our_io_stat(data))
    t_read = best_of(3, lambda: read_capture(data))
    t_flows = best_of(3, lambda: analyse_capture(read_capture(data).packets))
    t_native = best_of(5, lambda: analyse_file(path, tool=tool))
    t_native_start = best_of(5, lambda: analyse_file(tiny, tool=tool))
    marginal = t_tshark - t_start
    print("| task | time, s | packets/s | vs tshark | vs tshark's marginal rate |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, t in (
        ("tshark -q -z io,stat,0.1 (process start included)", t_tshark),
        ("ours: frames + bytes per 100 ms (same table)", t_bins),
        ("Python: read + decode IP/TCP headers", t_read),
        ("Python reference: read + decode + per-flow analysis", t_flows),
        ("compiled: per-flow analysis (testbed-flows, process start and JSON included)",
         t_native),
    ):
        print(f"| {name} | {t:.3f} | {n / t:,.0f} | {t_tshark / t:.2f}x | {marginal / t:.2f}x |")
    print(f"| tshark start-up alone (a 1-packet file) | {t_start:.3f} | | | |")
    print(f"| tshark less its start-up | {marginal:.3f} | {n / marginal:,.0f} | | 1.00x |")
    print(f"| testbed-flows on the 1-packet file (start-up, JSON) | {t_native_start:.4f} "
          "| | | |")
    print(f"\ncompiled vs Python reference, same run: {t_flows / t_native:.1f}x")
    print(f"per-flow figures identical (compiled vs reference, {len(reference.flows)} "
          f"connections: every bin, RTT, count, delay statistic): {identical}")
    print(f"100 ms bins identical to tshark's: {same} ({len(ours)} bins)\n")
    return path


def write_big(source: Path, target: Path, size: int) -> tuple[int, int]:
    """``source`` repeated up to ``size`` bytes: copy k moved on by k times its span (whole
    seconds) and every TCP/UDP port moved by k, so each copy is its own connections."""
    data = source.read_bytes()
    frames = list(iter_frames(data))
    span_s = (frames[-1].ts_ns - frames[0].ts_ns) // 10**9 + 2
    ports: list[int] = []  # offsets of the port fields of frames with a whole TCP/UDP header
    secs: list[int] = []
    body = bytearray()
    for f in frames:
        rec = len(body)
        body += data[f.start - 16 : f.start + f.caplen]
        secs.append(rec)
        packet = decode(data, f.ts_ns, f.linktype, f.start, f.caplen, f.orig_len)
        if packet is not None and packet.proto in (6, 17) and (packet.sport or packet.dport):
            l3 = f.start + 14  # Ethernet (the recorder and the fixture)
            l4 = l3 + (data[l3] & 0x0F) * 4
            ports.append(rec + 16 + (l4 - f.start))
    copies = max(1, (size - 24) // len(body))
    copies = min(copies, 60_000)
    sec = struct.Struct("<I")
    port = struct.Struct("!H")
    with target.open("wb") as out:
        out.write(data[:24])
        for k in range(copies):
            chunk = bytearray(body)
            for at in secs:
                sec.pack_into(chunk, at, sec.unpack_from(chunk, at)[0] + k * span_s)
            for at in ports:
                for a in (at, at + 2):
                    port.pack_into(chunk, a, (port.unpack_from(chunk, a)[0] + k) % 65536)
            out.write(chunk)
    return copies, copies * len(frames)


_CALLER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from orchestrator.services.flowtool import analyse_file
t = time.perf_counter()
got = analyse_file(Path(sys.argv[1]), tool=sys.argv[2])
dt = time.perf_counter() - t
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(len(got.flows), sum(f.data_packets for f in got.flows), dt, hwm)
"""


def bench_big(args: argparse.Namespace, tmp: Path, source: Path) -> None:
    tool = find_tool()
    assert tool is not None
    if not os.access(TIME, os.X_OK):
        sys.exit(f"{TIME} (GNU time) is needed for the peak RSS: apt-get install time")
    big = tmp / "big.pcap"
    t = time.perf_counter()
    copies, packets = write_big(source, big, int(args.big_gb * 1e9))
    size = big.stat().st_size
    print(f"big capture: the bench capture {copies} times, {packets:,} packets, "
          f"{size / 1e9:.2f} GB (written in {time.perf_counter() - t:.0f} s)\n")
    print("| testbed-flows on the big capture | time, s | packets/s | peak RSS, MB |")
    print("| --- | ---: | ---: | ---: |")
    # GNU time's child is forked from it, not vforked from this (big) process, so its
    # maximum RSS is the tool's own.
    for run in range(2):  # the first may read from disk, the second from the page cache
        t = time.perf_counter()
        proc = subprocess.run([TIME, "-f", "%M", tool, str(big)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, check=True)
        dt = time.perf_counter() - t
        kb = int(proc.stderr.split()[-1])
        print(f"| tool alone, run {run + 1} | {dt:.2f} | {packets / dt:,.0f} | {kb / 1024:.0f} |")
    out = subprocess.run([sys.executable, "-c", _CALLER, str(big), tool, str(ROOT)],
                         check=True, capture_output=True, text=True).stdout.split()
    flows, data_packets, dt, hwm = int(out[0]), int(out[1]), float(out[2]), int(out[3])
    print(f"| as ingest calls it (Python caller, its own peak RSS) | {dt:.2f} "
          f"| {packets / dt:,.0f} | {hwm / 1024:.0f} |")
    print(f"\n{flows} connections, {data_packets:,} data segments\n")
    big.unlink()


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
            with server.client(f"bench{batch}", batch_size=batch) as c:
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
    parser.add_argument("--big-gb", type=float, default=2.0,
                        help="size of the generated capture for the memory bench (0: skip)")
    parser.add_argument("--skip-influx", action="store_true")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} (1, 5, 15 min) at the start\n")
    with tempfile.TemporaryDirectory(prefix="an-bench-") as tmp:
        path = bench_capture(args, Path(tmp))
        if args.big_gb > 0:
            bench_big(args, Path(tmp), path)
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f} (1, 5, 15 min) at the end\n")
    if not args.skip_influx:
        bench_influx(args)


if __name__ == "__main__":
    main()
