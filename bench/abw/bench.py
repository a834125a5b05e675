#!/usr/bin/env python3
"""Accuracy bench driver for tools/abw (stdlib only).

Topology: netns abw-<pid>-s (sender, cross-traffic source), abw-<pid>-m
(middle) and abw-<pid>-r (receiver, cross-traffic sink), joined by two veth
pairs. The egress of the sender's veth carries a tbf qdisc: that is the
bottleneck of known capacity C. The middle namespace forwards in the kernel
or, for conditions with an RTT, through linkem (tools/linkem: TUN devices,
RTT/2 of delay each way, no rate limit), so the delay comes after the
bottleneck. Cross traffic (abw-cross, constant or Poisson, IP packets of
1000 bytes) goes through the same tbf; its delivered bytes are binned at the
receiver, and for every estimate the ground truth is

    A = (C - X_L2) * L / (L + 14)

where X_L2 is the cross traffic that left the bottleneck during the
estimate's own [start, end] window (delivered at the sink during that window
shifted by RTT/2) counted as tbf counts it (IP bytes + 14-byte Ethernet
header), and L/(L+14) converts the remaining link-layer capacity to the IP
rate of probes of L bytes (the estimator reports IP-level rates).

tbf settings (what "capacity" means here): rate C; burst = 2 x 1514 B (two
full frames, the least tbf accepts with headroom; tbf's watchdog is an
hrtimer, so a small bucket still delivers C), so C holds on time scales
down to a few packets: with a 1 ms bucket at 100 Mbit/s (12.5 kB) a
70 kB probe stream passes 18% above C before queueing at all, which is a
property of the policer, not of the path's capacity;
limit (queue) = max(C x 200 ms, 32 kB), a deep buffer as on mobile links.
The veth itself is not rate-limited (~Gbit/s), so C is the only bottleneck.
"""
import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

PID = os.getpid()
NS_S = f"abw-{PID}-s"
NS_M = f"abw-{PID}-m"
NS_R = f"abw-{PID}-r"
IF_S = f"abws{PID % 100000}"
IF_MS = f"abwms{PID % 100000}"
IF_MR = f"abwmr{PID % 100000}"
IF_R = f"abwr{PID % 100000}"
IP_S = "10.77.0.1"
IP_MS = "10.77.0.2"
IP_MR = "10.77.1.1"
IP_R = "10.77.1.2"
ABW_PORT = 7351
CROSS_PORT = 9000
CROSS_SIZE = 1000
PROBE_SIZE = 1400


def sh(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, **kw)


def ns(name, *args):
    return ["ip", "netns", "exec", name, *args]


def setup():
    """S --veth (tbf: the bottleneck)--> M --veth--> R; M forwards in the
    kernel, or through linkem's TUN devices when an RTT is emulated."""
    for n in (NS_S, NS_M, NS_R):
        sh("ip", "netns", "add", n)
        sh(*ns(n, "ip", "link", "set", "lo", "up"))
    sh("ip", "-n", NS_S, "link", "add", IF_S, "type", "veth", "peer", "name", IF_MS, "netns", NS_M)
    sh("ip", "-n", NS_R, "link", "add", IF_R, "type", "veth", "peer", "name", IF_MR, "netns", NS_M)
    for n, i, a in ((NS_S, IF_S, f"{IP_S}/30"), (NS_M, IF_MS, f"{IP_MS}/30"),
                    (NS_M, IF_MR, f"{IP_MR}/30"), (NS_R, IF_R, f"{IP_R}/30")):
        sh("ip", "-n", n, "addr", "add", a, "dev", i)
        sh("ip", "-n", n, "link", "set", i, "up")
    sh("ip", "-n", NS_S, "route", "add", "default", "via", IP_MS)
    sh("ip", "-n", NS_R, "route", "add", "default", "via", IP_MR)
    # The recipe of tools/linkem/scripts/netns-demo.sh: persistent TUN
    # devices and one routing table per direction; the rules that send
    # traffic into them are added only while linkem runs (set_rtt).
    for dev, table in (("lkup", "101"), ("lkdn", "102")):
        sh("ip", "-n", NS_M, "tuntap", "add", "mode", "tun", "name", dev)
        sh(*ns(NS_M, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"))
        sh(*ns(NS_M, "sysctl", "-qw", f"net.ipv4.conf.{dev}.rp_filter=0"))
        sh("ip", "-n", NS_M, "link", "set", dev, "up")
        sh("ip", "-n", NS_M, "route", "add", "default", "dev", dev, "table", table)
    for key in ("ip_forward=1", "conf.all.rp_filter=0", "conf.default.rp_filter=0"):
        sh(*ns(NS_M, "sysctl", "-qw", f"net.ipv4.{key}"))
    # no segmentation offloads on the shaped path (tbf then sees real packets)
    if shutil.which("ethtool"):
        sh(*ns(NS_S, "ethtool", "-K", IF_S, "tso", "off", "gso", "off", "gro", "off"),
           check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Delay:
    """linkem in the middle namespace adding RTT/2 in each direction (no
    rate limit, so tbf stays the only bottleneck); None for RTT 0."""

    def __init__(self, bins):
        self.bins, self.rtt_ms, self.proc = bins, 0, None

    def set(self, rtt_ms):
        if rtt_ms == self.rtt_ms:
            return
        self.stop()
        if rtt_ms > 0:
            prof = f"/tmp/abw-bench-{PID}-linkem.yaml"
            with open(prof, "w") as f:
                f.write('operator: {mcc_mnc: "001-01", name: "abw bench", country: "XX"}\nrat: LTE\n'
                        f"uplink: {{delay_ms: {rtt_ms / 2}, queue_packets: 100000}}\n"
                        f"downlink: {{delay_ms: {rtt_ms / 2}, queue_packets: 100000}}\n")
            # real-time priority keeps departures on time on a busy host
            self.proc = subprocess.Popen(ns(NS_M, f"{self.bins}/linkem", "run", "--profile", prof,
                                            "--uplink-tun", "lkup", "--downlink-tun", "lkdn",
                                            "--realtime", "20"), stdout=subprocess.DEVNULL)
            time.sleep(0.3)
            sh("ip", "-n", NS_M, "rule", "add", "iif", IF_MS, "lookup", "101", "pref", "1001")
            sh("ip", "-n", NS_M, "rule", "add", "iif", IF_MR, "lookup", "102", "pref", "1002")
            time.sleep(0.2)
        self.rtt_ms = rtt_ms

    def stop(self):
        subprocess.run(["ip", "-n", NS_M, "rule", "del", "pref", "1001"], capture_output=True)
        subprocess.run(["ip", "-n", NS_M, "rule", "del", "pref", "1002"], capture_output=True)
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
            self.proc = None
        self.rtt_ms = 0


def cleanup():
    for n in (NS_S, NS_M, NS_R):
        r = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True)
        for p in r.stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(p), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", n], capture_output=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(f"/tmp/abw-bench-{PID}-linkem.yaml")


def shape(cap_mbit):
    rate_bps = cap_mbit * 1e6
    burst = 2 * 1514
    limit = max(32000, int(rate_bps / 8 * 0.2))
    sh(*ns(NS_S, "tc", "qdisc", "replace", "dev", IF_S, "root", "tbf",
           "rate", f"{cap_mbit}mbit", "burst", str(burst), "limit", str(limit)))
    return burst, limit


def truth_bps(cap_mbit, sink, t0, t1):
    """Available bandwidth (IP rate of PROBE_SIZE probes) over [t0, t1] (times
    at the bottleneck; the caller shifts them to the sink)."""
    bin_s = sink["bin_ms"] / 1000.0
    base = sink["t0_ns"] / 1e9
    total = 0.0
    for i, b in enumerate(sink["bytes"]):
        s, e = base + i * bin_s, base + (i + 1) * bin_s
        ov = min(e, t1) - max(s, t0)
        if ov > 0:
            total += b * ov / bin_s
    x_ip = total * 8 / max(t1 - t0, 1e-9)
    x_l2 = x_ip * (CROSS_SIZE + 14) / CROSS_SIZE
    return max(cap_mbit * 1e6 - x_l2, 0.0) * PROBE_SIZE / (PROBE_SIZE + 14), x_ip


def run_condition(bins, delay, method, cap, load, process, rtt_ms, count, extra, timeout):
    delay.set(rtt_ms)
    shape(cap)
    sink = subprocess.Popen(ns(NS_R, f"{bins}/abw-cross", "sink", "--listen",
                               f"{IP_R}:{CROSS_PORT}", "--bin-ms", "10", "--duration", "900"),
                            stdout=subprocess.PIPE, text=True)
    cross = None
    time.sleep(0.2)
    if load > 0:
        rate = load * cap * 1e6 * CROSS_SIZE / (CROSS_SIZE + 14)  # IP rate for load x C at L2
        cross = subprocess.Popen(ns(NS_S, f"{bins}/abw-cross", "send", "--to",
                                    f"{IP_R}:{CROSS_PORT}", "--rate", str(rate), "--size",
                                    str(CROSS_SIZE), "--process", process, "--duration", "900",
                                    "--seed", str(int(time.time()))))
        time.sleep(1.0)
    cmd = ns(NS_S, f"{bins}/abw", "send", "-s", IP_R, "-m", method, "-n", str(count),
             "--size", str(PROBE_SIZE), *extra)
    if method == "spruce":
        cmd += ["--capacity", f"{cap * PROBE_SIZE / (PROBE_SIZE + 14)}M"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out = p.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += json.dumps({"type": "error", "kind": "bench_timeout", "error": "timeout"}) + "\n"
    if cross:
        cross.terminate()
        cross.wait()
    time.sleep(0.05)
    sink.send_signal(signal.SIGTERM)
    sink_out, _ = sink.communicate(timeout=10)
    sinkd = json.loads(sink_out.strip().splitlines()[-1])
    rows = []
    for line in out.splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("type") == "estimate":
            # cross traffic that left the bottleneck during the estimate
            # reaches the sink one forward delay (RTT/2) later
            d = rtt_ms / 2000.0
            truth, x = truth_bps(cap, sinkd, r["start_unix_s"] + d, r["end_unix_s"] + d)
            rows.append({"est": r["estimate_bps"], "truth": truth, "cross_ip": x,
                         "low": r.get("low_bps"), "high": r.get("high_bps"),
                         "latency": r["latency_s"], "bytes": r["bytes_sent"],
                         "rel": (r["estimate_bps"] - truth) / truth if truth > 0 else float("nan"),
                         "record": r})
        else:
            rows.append({"error": r.get("kind"), "message": r.get("error")})
    return rows


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    f, c = math.floor(k), math.ceil(k)
    return xs[f] + (xs[c] - xs[f]) * (k - f)


def summarize(rows):
    ok = [r for r in rows if "est" in r and not math.isnan(r["rel"])]
    errs = [r for r in rows if "error" in r]
    if not ok:
        return {"n": 0, "errors": len(errs)}
    a = [abs(r["rel"]) for r in ok]
    return {
        "n": len(ok), "errors": len(errs),
        "med_abs": pct(a, 0.5), "p90_abs": pct(a, 0.9),
        "bias": statistics.median([r["rel"] for r in ok]),
        "lat": statistics.median([r["latency"] for r in ok]),
        "bytes": statistics.mean([r["bytes"] for r in ok]),
        "truth": statistics.median([r["truth"] for r in ok]),
        "est": statistics.median([r["est"] for r in ok]),
    }


def grid(short):
    """(method, cap Mbit/s, load, process, RTT ms, estimates, extra args)."""
    conds = []
    if short:
        caps, loads = [5, 25, 100], [(0.0, "const"), (0.4, "poisson"), (0.8, "const")]
        for c in caps:
            for load, p in loads:
                conds.append(("yaz", c, load, p, 0, 3, []))
        conds.append(("yaz", 25, 0.4, "poisson", 80, 3, []))
        conds.append(("spruce", 25, 0.4, "poisson", 0, 2, []))
        conds.append(("pathload", 25, 0.4, "poisson", 0, 1, ["--fleet-len", "6"]))
        return conds
    caps = [2, 5, 10, 25, 50, 100]
    loads = [(0.0, "const")] + [(load, p) for load in (0.2, 0.4, 0.6, 0.8) for p in ("const", "poisson")]
    for c in caps:
        for load, p in loads:
            conds.append(("yaz", c, load, p, 0, 5, []))
    # RTT as an extra dimension on a subset: linkem adds RTT/2 each way
    for rtt in (20, 80):
        for c in (5, 25, 100):
            for load, p in ((0.2, "poisson"), (0.6, "poisson")):
                conds.append(("yaz", c, load, p, rtt, 5, []))
    for c in (5, 25, 100):
        for load in (0.0, 0.2, 0.6):
            conds.append(("spruce", c, load, "poisson", 0, 3, []))
    # pathload's own defaults (12-stream fleets, 9x idle) need tens of
    # seconds per estimate; the bench uses 6-stream fleets to stay in time.
    for c in (5, 25, 100):
        for load in (0.2, 0.6):
            conds.append(("pathload", c, load, "poisson", 0, 2, ["--fleet-len", "6"]))
    return conds


def fmt_table(results):
    lines = ["| method | C (Mbit/s) | cross | process | RTT (ms) | n | err | median truth (Mbit/s) "
             "| median est (Mbit/s) | median abs rel err | p90 abs rel err | median signed err "
             "| median latency (s) | bytes/estimate |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (m, c, load, p, rtt), s in results:
        if s["n"] == 0:
            lines.append(f"| {m} | {c} | {int(load*100)}% | {p} | {rtt} | 0 | {s['errors']} | | | | | | | |")
            continue
        lines.append(f"| {m} | {c} | {int(load*100)}% | {p if load > 0 else '-'} | {rtt} | {s['n']} | {s['errors']} "
                     f"| {s['truth']/1e6:.2f} | {s['est']/1e6:.2f} | {s['med_abs']*100:.1f}% "
                     f"| {s['p90_abs']*100:.1f}% | {s['bias']*100:+.1f}% | {s['lat']:.2f} "
                     f"| {s['bytes']/1e3:.0f} kB |")
    return "\n".join(lines)


# The floors for the default method, pooled over the grid.
FLOORS = (("median abs relative error", "<= 10%", "med_abs", 0.10, lambda v: f"{v*100:.1f}%"),
          ("90th percentile abs relative error", "<= 25%", "p90_abs", 0.25, lambda v: f"{v*100:.1f}%"),
          ("median latency per estimate", "<= 1.5 s", "lat", 1.5, lambda v: f"{v:.2f} s"),
          ("probe traffic per estimate (largest)", "<= 1 MB", "max_bytes", 1e6, lambda v: f"{v/1e3:.0f} kB"))


def floors(rows):
    """Markdown table of the floors for the default method (yaz)."""
    s = summarize(rows)
    if not s["n"]:
        return ""
    s["max_bytes"] = max(r["bytes"] for r in rows if "bytes" in r)
    lines = [f"## Floors for the default method (yaz), pooled over {s['n']} estimates\n",
             "| floor | target | measured | met? |", "|---|---|---|---|"]
    for name, target, key, limit, fmt in FLOORS:
        lines.append(f"| {name} | {target} | {fmt(s[key])} | {'yes' if s[key] <= limit else '**no**'} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--short", action="store_true", help="CI-sized grid (< ~3 min)")
    ap.add_argument("--methods", default="yaz,pathload,spruce")
    ap.add_argument("--caps", default="", help="override capacities, e.g. 10,50")
    ap.add_argument("--rtts", default="", help="keep only these RTTs (ms), e.g. 0,80")
    ap.add_argument("--only", default="", help="run one condition METHOD:CAP:LOAD:PROCESS[:COUNT[:RTT_MS]]")
    ap.add_argument("--extra", default="", help="extra args for abw send (space separated)")
    ap.add_argument("--results", default="", help="write the markdown table here "
                    "(full mode default: bench/abw/RESULTS.md)")
    ap.add_argument("--json", default="", help="write raw rows as JSON here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/abw needs root (network namespaces, tc)", file=sys.stderr)
        return 2
    methods = set(a.methods.split(","))
    conds = [c for c in grid(a.short) if c[0] in methods]
    if a.caps:
        caps = {float(x) if "." in x else int(x) for x in a.caps.split(",")}
        conds = [c for c in conds if c[1] in caps]
    if a.rtts:
        rtts = {int(x) for x in a.rtts.split(",")}
        conds = [c for c in conds if c[4] in rtts]
    extra = a.extra.split() if a.extra else []
    if a.only:
        f = a.only.split(":")
        conds = [(f[0], float(f[1]) if "." in f[1] else int(f[1]), float(f[2]), f[3],
                  int(f[5]) if len(f) > 5 else 0, int(f[4]) if len(f) > 4 else 3, [])]

    def on_signal(signum, frame):
        cleanup()
        sys.exit(130)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.time()
    results, raw = [], []
    pooled = {}
    try:
        setup()
        server = subprocess.Popen(ns(NS_R, f"{a.bin_dir}/abw", "recv", "--listen", f"{IP_R}:{ABW_PORT}"),
                                  stdout=subprocess.DEVNULL)
        time.sleep(0.3)
        delay = Delay(a.bin_dir)
        for (m, c, load, p, rtt, k, ex) in conds:
            timeout = 60 + k * (120 if m != "yaz" else 15)
            rows = run_condition(a.bin_dir, delay, m, c, load, p, rtt, k, ex + extra, timeout)
            s = summarize(rows)
            results.append(((m, c, load, p, rtt), s))
            raw.append({"method": m, "cap_mbit": c, "load": load, "process": p, "rtt_ms": rtt, "rows": rows})
            pooled.setdefault(m, []).extend(rows)
            if rtt:
                pooled.setdefault(f"{m} (RTT > 0 only)", []).extend(rows)
            if s["n"]:
                print(f"{m:8s} C={c:>3} load={load:.1f} {p:7s} rtt={rtt:>2} n={s['n']} err={s['errors']} "
                      f"truth={s['truth']/1e6:7.2f} est={s['est']/1e6:7.2f} med|e|={s['med_abs']*100:5.1f}% "
                      f"p90|e|={s['p90_abs']*100:5.1f}% bias={s['bias']*100:+5.1f}% lat={s['lat']:.2f}s "
                      f"bytes={s['bytes']/1e3:.0f}kB", flush=True)
            else:
                print(f"{m:8s} C={c:>3} load={load:.1f} {p:7s} rtt={rtt:>2} no estimate; errors: "
                      f"{[r.get('error') for r in rows]}", flush=True)
        delay.stop()
        server.terminate()
    finally:
        cleanup()
    summary = ["| method | n | errors | median abs rel err | p90 abs rel err | median latency (s) "
               "| median bytes/estimate |", "|---|---|---|---|---|---|---|"]
    for m, rows in pooled.items():
        s = summarize(rows)
        if s["n"]:
            byt = statistics.median([r["bytes"] for r in rows if "bytes" in r])
            summary.append(f"| {m} | {s['n']} | {s['errors']} | {s['med_abs']*100:.1f}% | {s['p90_abs']*100:.1f}% "
                           f"| {s['lat']:.2f} | {byt/1e3:.0f} kB |")
    table = fmt_table(results)
    text = ("## Pooled over the grid\n\n" + "\n".join(summary) + "\n\n" + floors(pooled.get("yaz", []))
            + "\n## Per condition\n\n" + table + "\n")
    print()
    print(text)
    print(f"bench wall time {time.time() - started:.0f} s")
    full_grid = not (a.short or a.only or a.caps or a.rtts or a.extra
                     or methods != {"yaz", "pathload", "spruce"})
    out = a.results or (os.path.join(os.path.dirname(__file__), "RESULTS.md") if full_grid else "")
    if out:
        with open(out, "w") as f:
            f.write("# abw accuracy bench: latest full run\n\n")
            f.write(f"Generated by `bench/abw/run.sh` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
                    f"(wall time {time.time() - started:.0f} s). Probe size {PROBE_SIZE} B, "
                    f"cross traffic {CROSS_SIZE}-byte UDP, errors relative to ground truth "
                    "(capacity minus delivered cross traffic over each estimate's window).\n\n")
            f.write(text)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
