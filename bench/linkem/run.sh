#!/usr/bin/env bash
# Forwarding throughput and added per-packet latency of linkem on one core.
#
# Builds tools/linkem (release), makes the three-namespace topology of
# tools/linkem/scripts/netns-demo.sh (tag bench-PID), pins linkem to CPU 1
# (SCHED_FIFO 20) and the traffic tools to CPU 0, and measures with linkem's
# own probe tools (no iperf3 needed):
#   1. throughput: an unpaced flood of 1500-byte IP packets through a
#      pass-through profile, and through a shaped 500 Mbit/s profile;
#   2. latency: UDP round trips of 1500-byte packets with linkem in the path
#      minus the same with plain kernel routing (`netns-demo.sh direct`),
#      halved because a round trip crosses linkem twice; idle and under a
#      200 Mbit/s background load.
# Floors (issue 4): >= 200 Mbit/s at 1500 bytes, < 100 us added median.
# Writes the report to stdout and to bench/linkem/RESULTS.md.
# Usage: sudo bench/linkem/run.sh [seconds-per-throughput-run (default 5)]
set -euo pipefail

if [ "$(id -u)" != 0 ] || [ ! -e /dev/net/tun ]; then
    echo "bench/linkem/run.sh needs root and /dev/net/tun (network namespaces, TUN devices)" >&2
    exit 2
fi
secs=${1:-5}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
(cd "$root/tools" && cargo build --release -q -p linkem)
L=$root/tools/target/release/linkem
S=$root/tools/linkem/scripts/netns-demo.sh
tag=bench-$$
A=lkm-a-$tag R=lkm-r-$tag B=lkm-b-$tag
work=$(mktemp -d)
linkem_pid=
cleanup() {
    [ -n "$linkem_pid" ] && kill "$linkem_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    bash "$S" down "$tag"
    rm -rf "$work"
}
trap cleanup EXIT
bash "$S" up "$tag" >/dev/null

op='operator: {mcc_mnc: "001-01", name: "Bench", country: "XX"}
rat: LTE'
printf '%s\nuplink: {queue_packets: 1000}\ndownlink: {queue_packets: 1000}\n' "$op" >"$work/pass.yaml"
printf '%s\nuplink: {rate_bps: 500000000}\ndownlink: {rate_bps: 500000000}\n' "$op" >"$work/shaped.yaml"

json() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)"; }

start_linkem() {
    ip netns exec "$R" taskset -c "${2:-1}" "$L" run --profile "$1" --uplink-tun lkup --downlink-tun lkdn \
        --state-file "$work/state.json" --realtime 20 >"$work/summary.json" &
    linkem_pid=$!
    for _ in $(seq 100); do [ -e "$work/state.json" ] && break; sleep 0.05; done
}
stop_linkem() {
    kill "$linkem_pid"
    wait "$linkem_pid" || true
    linkem_pid=
    rm -f "$work/state.json"
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# Throughput: returns "received_mbps linkem_cpu_percent offered_mbps"
throughput() {
    start_linkem "$1"
    ip netns exec "$B" taskset -c 0 "$L" probe sink --listen 0.0.0.0:5000 --duration-s $((secs + 3)) \
        --bin-ms 1000 --quiet-s 1 >"$work/sink.json" &
    local sink=$!
    sleep 0.3
    local t0 c0 t1 c1
    t0=$(date +%s.%N)
    c0=$(cpu_ticks "$linkem_pid")
    ip netns exec "$A" taskset -c 0 "$L" probe flood --to 198.18.2.2:5000 --payload 1472 \
        --duration-s "$secs" >"$work/flood.json"
    c1=$(cpu_ticks "$linkem_pid")
    t1=$(date +%s.%N)
    wait "$sink"
    stop_linkem
    python3 - "$work" "$t0" "$t1" "$c0" "$c1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
w, t0, t1, c0, c1, hz = sys.argv[1], *map(float, sys.argv[2:])
sink = json.load(open(f"{w}/sink.json"))
flood = json.load(open(f"{w}/flood.json"))
bins = sink["bins_ip_bytes"][1:-1] or sink["bins_ip_bytes"]
rx = sum(bins) * 8 / len(bins) / 1e6
offered = flood["ip_bytes"] * 8 / (t1 - t0) / 1e6
cpu = (c1 - c0) / hz / (t1 - t0) * 100
print(f"{rx:.0f} {cpu:.0f} {offered:.0f}")
PY
}

# Median UDP round trip of 1500-byte packets, in microseconds.
rtt() {
    ip netns exec "$A" taskset -c 0 "$L" probe ping --to 198.18.2.2:7 --payload 1472 \
        --count "$1" --interval-ms 1 | python3 -c "import json,sys; print(round(json.load(sys.stdin)['median_us'], 1))"
}

ip netns exec "$B" taskset -c 0 "$L" probe echo --listen 0.0.0.0:7 --duration-s 600 >/dev/null &
echo_pid=$!

read -r pass_rx pass_cpu pass_offered < <(throughput "$work/pass.yaml")
read -r shaped_rx shaped_cpu shaped_offered < <(throughput "$work/shaped.yaml")

# Latency, idle and under a 200 Mbit/s load, alternating direct and via
# linkem three times to average out the host's other work. Two layouts:
# linkem on the traffic's core (CPU 0: what linkem itself adds) and on the
# other core (CPU 1: adds a cross-CPU wake-up, which on this VM costs tens of
# microseconds per packet whoever the sleeper is).
load() {
    ip netns exec "$A" taskset -c 0 "$L" probe flood --to 198.18.2.2:5001 --payload 1472 \
        --rate-bps 200000000 --duration-s "$1" >/dev/null &
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A res
for cpu in 0 1; do
    d_idle=() v_idle=() d_load=() v_load=()
    for i in 1 2 3; do
        bash "$S" direct "$tag"
        d_idle+=("$(rtt 1000)")
        load 3; d_load+=("$(rtt 1500)"); wait $!
        bash "$S" via-linkem "$tag"
        start_linkem "$work/pass.yaml" "$cpu"
        v_idle+=("$(rtt 1000)")
        load 3; v_load+=("$(rtt 1500)"); wait $!
        stop_linkem
    done
    res[di$cpu]=$(median "${d_idle[@]}") res[vi$cpu]=$(median "${v_idle[@]}")
    res[dl$cpu]=$(median "${d_load[@]}") res[vl$cpu]=$(median "${v_load[@]}")
    res[ai$cpu]=$(python3 -c "print(round((${res[vi$cpu]} - ${res[di$cpu]}) / 2, 1))")
    res[al$cpu]=$(python3 -c "print(round((${res[vl$cpu]} - ${res[dl$cpu]}) / 2, 1))")
done
kill "$echo_pid" 2>/dev/null || true

verdict() { python3 -c "print('PASS' if $1 else 'FAIL')"; }

report=$(cat <<MD
# linkem forwarding bench

Latest output of \`bench/linkem/run.sh\` ($(date -u +%Y-%m-%dT%H:%M:%SZ)).
Host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r),
load average at the end $(cut -d' ' -f1-3 /proc/loadavg) (the host is shared with other builds).
linkem at SCHED_FIFO 20, traffic tools on CPU 0; 1500-byte IP packets.

| measure | value | floor | verdict |
| --- | --- | --- | --- |
| forwarding throughput, pass-through profile (received) | ${pass_rx} Mbit/s (offered ${pass_offered}, linkem CPU ${pass_cpu}% of one core) | >= 200 Mbit/s | $(verdict "$pass_rx >= 200") |
| forwarding throughput, shaped 500 Mbit/s profile (received) | ${shaped_rx} Mbit/s (offered ${shaped_offered}, linkem CPU ${shaped_cpu}% of one core) | >= 200 Mbit/s | $(verdict "$shaped_rx >= 200") |
| added latency per packet, idle, linkem on the traffic's core (median, per crossing) | ${res[ai0]} us (RTT median ${res[vi0]} us via linkem vs ${res[di0]} us direct) | < 100 us | $(verdict "${res[ai0]} < 100") |
| added latency per packet, 200 Mbit/s load, linkem on the traffic's core | ${res[al0]} us (RTT median ${res[vl0]} us via linkem vs ${res[dl0]} us direct) | < 100 us | $(verdict "${res[al0]} < 100") |
| added latency per packet, idle, linkem on the other core | ${res[ai1]} us (RTT median ${res[vi1]} us via linkem vs ${res[di1]} us direct) | (info) | |
| added latency per packet, 200 Mbit/s load, linkem on the other core | ${res[al1]} us (RTT median ${res[vl1]} us via linkem vs ${res[dl1]} us direct) | (info) | |

Round trips: 1000 (idle) or 1500 (loaded) UDP echoes at 1 ms intervals per
repetition, three repetitions alternating direct routing and linkem; the
table shows the median of the three medians. A round trip crosses linkem
twice (uplink TUN, downlink TUN), hence the halving. Throughput runs pin
linkem to CPU 1 and the flood and sink to CPU 0. On the other core, the
extra latency is mostly the wake-up of an idle virtual CPU (an IPI through
the hypervisor), paid once per crossing; it is a property of the host, not
of linkem's per-packet work, and does not limit throughput.
MD
)
echo "$report"
echo "$report" >"$here/RESULTS.md"
