#!/usr/bin/env python3
"""Accuracy bench driver for tools/abw (stdlib only).

Topology: netns abw-<pid>-s (sender, cross-traffic source), abw-<pid>-m
(middle) and abw-<pid>-r (receiver, cross-traffic sink), joined by two veth
pairs. The egress of the sender's veth carries a tbf qdisc: that is the
bottleneck of known capacity C. The middle namespace forwards in the kernel
or, for conditions with an RTT, through linkem (tools/linkem: TUN devices,
RTT/2 of delay each way, no rate limit), so the delay comes after the
bottleneck. Cross traffic (abw-cross, constant or Poisson, IP packets of
1000 bytes) goes through the same tbf; the sender logs the bytes it sent in
10 ms bins, and for every estimate the ground truth is

    A = (C - X_L2) * L / (L + 14)

where X_L2 is the cross traffic offered to the bottleneck during the
estimate's own [start, end] window (the sender's log: the sender sits in
front of the bottleneck, so its send times are its arrival times there;
the bytes delivered at the sink would be shifted by the queueing that the
probes themselves cause), counted as tbf counts it (IP bytes + 14-byte
Ethernet header), and L/(L+14) converts the remaining link-layer capacity
to the IP rate of probes of L bytes (the estimator reports IP-level rates).

Trace-driven conditions (reported as their own rows): no tbf; linkem's
uplink replays a Mahimahi trace of ../shared/traces/cellular (LTE, UMTS)
as the bottleneck, with RTT/2 of delay each way. A trace line is one
opportunity to deliver 1500 bytes at that millisecond (trace time 0 is
linkem's start; the trace wraps), and linkem counts IP bytes, so the
ground truth of an estimate is

    A = 1500 * 8 * N(t0, t1) / (t1 - t0) - X_IP

with N the opportunities in the estimate's own window [t0, t1] in
linkem's clock (unix time minus the offset read from linkem's state
document: time_unix_ms / 1000 - emulator_time_s) and X_IP the cross
traffic's IP rate from the sender's log over the same window; cross
traffic is a fraction of the trace's mean rate. Estimates on these links
are scored against what the link could deliver in their own window.

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
import bisect
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


TRACE_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                         "..", "..", "..", "shared", "traces", "cellular"))
OPPORTUNITY_BYTES = 1500


class Trace:
    """A Mahimahi trace: opportunity times (ms), wrapping at its last one."""

    def __init__(self, name):
        self.name = name
        with open(os.path.join(TRACE_DIR, name)) as f:
            self.ms = [int(x) for x in f.read().split()]
        self.period = self.ms[-1]
        self.mean_bps = len(self.ms) * OPPORTUNITY_BYTES * 8 / (self.period / 1000)

    def _count_before(self, t_ms):
        """Opportunities at trace times < t_ms (t_ms >= 0, with wrapping)."""
        k, r = divmod(t_ms, self.period)
        return int(k) * len(self.ms) + bisect.bisect_left(self.ms, r)

    def capacity_bps(self, t0_s, t1_s):
        """IP capacity over [t0, t1] seconds of emulator time."""
        n = self._count_before(max(t1_s, 0) * 1000) - self._count_before(max(t0_s, 0) * 1000)
        return n * OPPORTUNITY_BYTES * 8 / max(t1_s - t0_s, 1e-9)


class Delay:
    """linkem in the middle namespace adding RTT/2 in each direction: no
    rate limit (tbf stays the only bottleneck), or, with a trace, the
    trace on the uplink as the bottleneck; None for RTT 0 without trace."""

    def __init__(self, bins):
        self.bins, self.key, self.proc = bins, (0, None), None
        self.epoch_unix_s = 0.0

    def set(self, rtt_ms, trace=None):
        if (rtt_ms, trace and trace.name) == self.key:
            return
        self.stop()
        if rtt_ms > 0 or trace:
            prof = f"/tmp/abw-bench-{PID}-linkem.yaml"
            state = f"/tmp/abw-bench-{PID}-linkem-state.json"
            with contextlib.suppress(FileNotFoundError):
                os.remove(state)
            up = f"delay_ms: {rtt_ms / 2}, queue_packets: 100000"
            if trace:
                # a deep buffer (300 ms of the mean rate), as on mobile links
                qb = max(32000, int(trace.mean_bps / 8 * 0.3))
                up = f"delay_ms: {rtt_ms / 2}, trace: {os.path.join(TRACE_DIR, trace.name)}, queue_bytes: {qb}"
            with open(prof, "w") as f:
                f.write('operator: {mcc_mnc: "001-01", name: "abw bench", country: "XX"}\nrat: LTE\n'
                        f"uplink: {{{up}}}\n"
                        f"downlink: {{delay_ms: {rtt_ms / 2}, queue_packets: 100000}}\n")
            # real-time priority keeps departures on time on a busy host
            self.proc = subprocess.Popen(ns(NS_M, f"{self.bins}/linkem", "run", "--profile", prof,
                                            "--uplink-tun", "lkup", "--downlink-tun", "lkdn",
                                            "--state-file", state, "--realtime", "20"),
                                         stdout=subprocess.DEVNULL)
            time.sleep(0.3)
            sh("ip", "-n", NS_M, "rule", "add", "iif", IF_MS, "lookup", "101", "pref", "1001")
            sh("ip", "-n", NS_M, "rule", "add", "iif", IF_MR, "lookup", "102", "pref", "1002")
            time.sleep(0.2)
            for _ in range(50):
                try:
                    with open(state) as f:
                        st = json.load(f)
                    break
                except (FileNotFoundError, json.JSONDecodeError):
                    time.sleep(0.1)
            else:
                raise RuntimeError("linkem wrote no state document")
            # unix time = emulator time + epoch_unix_s
            self.epoch_unix_s = st["time_unix_ms"] / 1000 - st["emulator_time_s"]
        self.key = (rtt_ms, trace and trace.name)

    def stop(self):
        subprocess.run(["ip", "-n", NS_M, "rule", "del", "pref", "1001"], capture_output=True)
        subprocess.run(["ip", "-n", NS_M, "rule", "del", "pref", "1002"], capture_output=True)
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
            self.proc = None
        self.key = (0, None)


def cleanup():
    for n in (NS_S, NS_M, NS_R):
        r = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True)
        for p in r.stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(p), signal.SIGKILL)
        subprocess.run(["ip", "netns", "del", n], capture_output=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(f"/tmp/abw-bench-{PID}-linkem.yaml")
    with contextlib.suppress(FileNotFoundError):
        os.remove(f"/tmp/abw-bench-{PID}-linkem-state.json")


def shape(cap_mbit):
    """tbf of `cap_mbit` on the sender's veth; None: no tbf (trace rows)."""
    if cap_mbit is None:
        sh(*ns(NS_S, "tc", "qdisc", "del", "dev", IF_S, "root"), check=False,
           stderr=subprocess.DEVNULL)
        return None
    rate_bps = cap_mbit * 1e6
    burst = 2 * 1514
    limit = max(32000, int(rate_bps / 8 * 0.2))
    sh(*ns(NS_S, "tc", "qdisc", "replace", "dev", IF_S, "root", "tbf",
           "rate", f"{cap_mbit}mbit", "burst", str(burst), "limit", str(limit)))
    return burst, limit


def binned_rate(log, t0, t1):
    """IP rate (bit/s) of a binned byte log ({bin_ms, t0_ns, bytes}) over
    [t0, t1] (unix seconds), bins prorated; 0 without a log."""
    if not log:
        return 0.0
    bin_s = log["bin_ms"] / 1000.0
    base = log["t0_ns"] / 1e9
    total = 0.0
    for i in range(max(int((t0 - base) / bin_s) - 1, 0), min(int((t1 - base) / bin_s) + 2, len(log["bytes"]))):
        s, e = base + i * bin_s, base + (i + 1) * bin_s
        ov = min(e, t1) - max(s, t0)
        if ov > 0:
            total += log["bytes"][i] * ov / bin_s
    return total * 8 / max(t1 - t0, 1e-9)


def truth_bps(cap, cross_log, t0, t1, trace=None, epoch_unix_s=0.0):
    """Available bandwidth (IP rate of PROBE_SIZE probes) over [t0, t1]
    (unix seconds) and the cross traffic's IP rate: tbf of `cap` Mbit/s,
    or the trace's capacity in that window of linkem's clock."""
    x_ip = binned_rate(cross_log, t0, t1)
    if trace:
        c = trace.capacity_bps(t0 - epoch_unix_s, t1 - epoch_unix_s)
        return max(c - x_ip, 0.0), x_ip
    x_l2 = x_ip * (CROSS_SIZE + 14) / CROSS_SIZE
    return max(cap * 1e6 - x_l2, 0.0) * PROBE_SIZE / (PROBE_SIZE + 14), x_ip


def run_condition(bins, delay, method, cap, load, process, rtt_ms, count, extra, timeout):
    """`cap` is a capacity in Mbit/s (tbf) or a trace name (linkem)."""
    trace = Trace(cap) if isinstance(cap, str) else None
    delay.set(rtt_ms, trace)
    shape(None if trace else cap)
    # the sink receives the cross traffic (no ICMP errors back to the
    # sender); the ground truth comes from the sender's log
    sink = subprocess.Popen(ns(NS_R, f"{bins}/abw-cross", "sink", "--listen",
                               f"{IP_R}:{CROSS_PORT}", "--bin-ms", "10", "--duration", "900"),
                            stdout=subprocess.DEVNULL)
    cross = None
    time.sleep(0.2)
    if load > 0:
        if trace:
            rate = load * trace.mean_bps  # linkem counts IP bytes
        else:
            rate = load * cap * 1e6 * CROSS_SIZE / (CROSS_SIZE + 14)  # IP rate for load x C at L2
        cross = subprocess.Popen(ns(NS_S, f"{bins}/abw-cross", "send", "--to",
                                    f"{IP_R}:{CROSS_PORT}", "--rate", str(rate), "--size",
                                    str(CROSS_SIZE), "--process", process, "--duration", "900",
                                    "--seed", str(int(time.time())), "--bin-ms", "10"),
                                 stdout=subprocess.PIPE, text=True)
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
    cross_log = None
    if cross:
        cross.terminate()
        cross_out, _ = cross.communicate(timeout=10)
        cross_log = json.loads(cross_out.strip().splitlines()[-1])
    time.sleep(0.05)
    sink.send_signal(signal.SIGTERM)
    sink.wait(timeout=10)
    rows = []
    for line in out.splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("type") == "estimate":
            truth, x = truth_bps(cap, cross_log, r["start_unix_s"], r["end_unix_s"],
                                 trace, delay.epoch_unix_s)
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


# Trace-driven conditions: (trace file, RTT ms); LTE and UMTS uplinks.
TRACES = (("TMobile-LTE-short.up", 40), ("Verizon-LTE-short.up", 40), ("TMobile-UMTS-driving.up", 100))


def grid(short):
    """(method, cap Mbit/s or trace name, load, process, RTT ms, estimates, extra args)."""
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
    caps = [1, 2, 5, 10, 25, 50, 100]
    loads = [(0.0, "const")] + [(load, p) for load in (0.2, 0.4, 0.6, 0.8) for p in ("const", "poisson")]
    for c in caps:
        for load, p in loads:
            conds.append(("yaz", c, load, p, 0, 5, []))
    # RTT as an extra dimension on a subset: linkem adds RTT/2 each way
    for rtt in (20, 80, 200):
        for c in (1, 5, 25, 100):
            for load, p in ((0.2, "poisson"), (0.6, "poisson")):
                conds.append(("yaz", c, load, p, rtt, 5, []))
    conds.append(("yaz", 1, 0.0, "const", 200, 5, []))
    # trace-driven links: linkem replays the trace, no tbf (own rows)
    for name, rtt in TRACES:
        for load in (0.0, 0.3):
            conds.append(("yaz", name, load, "poisson", rtt, 10, []))
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


# Issue 16's goals for the default method, pooled over the grid (the
# tbf conditions; trace-driven rows are reported on their own).
FLOORS = (("median abs relative error", "<= 5%", "med_abs", 0.05, lambda v: f"{v*100:.1f}%"),
          ("90th percentile abs relative error", "<= 15%", "p90_abs", 0.15, lambda v: f"{v*100:.1f}%"),
          ("median latency per estimate", "<= 1.0 s", "lat", 1.0, lambda v: f"{v:.2f} s"),
          ("median probe traffic per estimate", "<= 0.5 MB", "med_bytes", 0.5e6, lambda v: f"{v/1e3:.0f} kB"),
          ("probe traffic per estimate (largest)", "<= 1 MB", "max_bytes", 1e6, lambda v: f"{v/1e3:.0f} kB"))


def floors(label, rows):
    """Markdown table of the goals for the default method (yaz)."""
    s = summarize(rows)
    if not s["n"]:
        return ""
    s["max_bytes"] = max(r["bytes"] for r in rows if "bytes" in r)
    s["med_bytes"] = statistics.median(r["bytes"] for r in rows if "bytes" in r)
    lines = [f"## Goals for the default method (yaz), {label}, pooled over {s['n']} estimates\n",
             "| goal | target | measured | met? |", "|---|---|---|---|"]
    for name, target, key, limit, fmt in FLOORS:
        lines.append(f"| {name} | {target} | {fmt(s[key])} | {'yes' if s[key] <= limit else '**no**'} |")
    return "\n".join(lines) + "\n"


def pool_key(m, cap, rtt):
    """Pooled groups a condition's estimates count in."""
    if isinstance(cap, str):
        return [f"{m} (trace-driven)"]
    return [m] + ([f"{m} (RTT 20-200 ms only)"] if rtt else [])


def report(raw):
    """Markdown report (pooled table, goals, per-condition tables) of raw
    per-condition results."""
    pooled, grid_res, trace_res = {}, [], []
    for c in raw:
        key = (c["method"], c["cap_mbit"], c["load"], c["process"], c["rtt_ms"])
        (trace_res if isinstance(c["cap_mbit"], str) else grid_res).append((key, summarize(c["rows"])))
        for k in pool_key(c["method"], c["cap_mbit"], c["rtt_ms"]):
            pooled.setdefault(k, []).extend(c["rows"])
    summary = ["| method | n | errors | median abs rel err | p90 abs rel err | median latency (s) "
               "| median bytes/estimate |", "|---|---|---|---|---|---|---|"]
    for m, rows in pooled.items():
        s = summarize(rows)
        if s["n"]:
            byt = statistics.median([r["bytes"] for r in rows if "bytes" in r])
            summary.append(f"| {m} | {s['n']} | {s['errors']} | {s['med_abs']*100:.1f}% | {s['p90_abs']*100:.1f}% "
                           f"| {s['lat']:.2f} | {byt/1e3:.0f} kB |")
    text = "## Pooled over the grid\n\n" + "\n".join(summary) + "\n\n"
    text += floors("the grid", pooled.get("yaz", [])) + "\n"
    text += floors("RTT 20-200 ms only", pooled.get("yaz (RTT 20-200 ms only)", []))
    text += "\n## Per condition\n\n" + fmt_table(grid_res) + "\n"
    if trace_res:
        text += ("\n## Trace-driven conditions (linkem replays the trace; C is the trace)\n\n"
                 + fmt_table(trace_res) + "\n")
    return text


def write_results(path, text, wall_s, note=""):
    with open(path, "w") as f:
        f.write("# abw accuracy bench: latest full run\n\n")
        f.write(f"Generated by `bench/abw/run.sh` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
                f"(wall time {wall_s:.0f} s{note}). Probe size {PROBE_SIZE} B, "
                f"cross traffic {CROSS_SIZE}-byte UDP, errors relative to ground truth "
                "(capacity minus the cross traffic offered over each estimate's window; "
                "for trace-driven rows the trace's capacity in that window).\n\n")
        f.write(text)


def parse_cap(x):
    if x.endswith((".up", ".down")):
        return x
    return float(x) if "." in x else int(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--short", action="store_true", help="CI-sized grid (< ~3 min)")
    ap.add_argument("--methods", default="yaz,pathload,spruce")
    ap.add_argument("--caps", default="", help="override capacities, e.g. 10,50")
    ap.add_argument("--rtts", default="", help="keep only these RTTs (ms), e.g. 0,80")
    ap.add_argument("--only", default="", help="run one condition METHOD:CAP:LOAD:PROCESS[:COUNT[:RTT_MS]] "
                    "(CAP: Mbit/s, or a trace file name of ../shared/traces/cellular)")
    ap.add_argument("--part", default="", help="K/N: run every N-th condition of the full grid from the "
                    "K-th (split a full run across holds; --json each part, then --render)")
    ap.add_argument("--render", default="", help="comma-separated raw JSON files (--json of the parts "
                    "of a full run): write the report from them and exit, running nothing")
    ap.add_argument("--extra", default="", help="extra args for abw send (space separated)")
    ap.add_argument("--results", default="", help="write the markdown table here "
                    "(full mode default: bench/abw/RESULTS.md)")
    ap.add_argument("--json", default="", help="write raw rows as JSON here")
    a = ap.parse_args()
    default_results = os.path.join(os.path.dirname(__file__), "RESULTS.md")
    if a.render:
        raw = []
        for path in a.render.split(","):
            with open(path) as f:
                raw.extend(json.load(f))
        text = report(raw)
        print(text)
        wall = sum(c.get("wall_s", 0) for c in raw)
        write_results(a.results or default_results, text, wall,
                      f", conditions only, run in {len(a.render.split(','))} parts")
        return 0
    if os.geteuid() != 0:
        print("bench/abw needs root (network namespaces, tc)", file=sys.stderr)
        return 2
    methods = set(a.methods.split(","))
    conds = [c for c in grid(a.short) if c[0] in methods]
    if a.caps:
        caps = {parse_cap(x) for x in a.caps.split(",")}
        conds = [c for c in conds if c[1] in caps]
    if a.rtts:
        rtts = {int(x) for x in a.rtts.split(",")}
        conds = [c for c in conds if c[4] in rtts]
    if a.part:
        k, n = (int(x) for x in a.part.split("/"))
        conds = conds[k - 1::n]
    extra = a.extra.split() if a.extra else []
    if a.only:
        f = a.only.split(":")
        conds = [(f[0], parse_cap(f[1]), float(f[2]), f[3],
                  int(f[5]) if len(f) > 5 else 0, int(f[4]) if len(f) > 4 else 3, [])]

    def on_signal(signum, frame):
        cleanup()
        sys.exit(130)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = time.time()
    raw = []
    try:
        setup()
        server = subprocess.Popen(ns(NS_R, f"{a.bin_dir}/abw", "recv", "--listen", f"{IP_R}:{ABW_PORT}"),
                                  stdout=subprocess.DEVNULL)
        time.sleep(0.3)
        delay = Delay(a.bin_dir)
        for (m, c, load, p, rtt, k, ex) in conds:
            timeout = 60 + k * (120 if m != "yaz" else 15)
            t0 = time.time()
            rows = run_condition(a.bin_dir, delay, m, c, load, p, rtt, k, ex + extra, timeout)
            s = summarize(rows)
            raw.append({"method": m, "cap_mbit": c, "load": load, "process": p, "rtt_ms": rtt, "rows": rows,
                        "wall_s": time.time() - t0})
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
    text = report(raw)
    print()
    print(text)
    print(f"bench wall time {time.time() - started:.0f} s")
    full_grid = not (a.short or a.only or a.caps or a.rtts or a.extra or a.part
                     or methods != {"yaz", "pathload", "spruce"})
    out = a.results or (default_results if full_grid else "")
    if out:
        write_results(out, text, time.time() - started)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
