#!/usr/bin/env bash
# Measurement server: iperf3 responders on ports 5201-5208, each restarted when it exits,
# ABw receivers (7351...), D-ITG's ITGRecv (signalling port 9000, flows on 9001) with
# the service that hands its receiver logs back (ditg_logs.py, port 9009), and optional
# egress shaping per emulated operator subnet. The capture service (capture_service.py,
# port 9010) takes the server's side of each run's packet capture for the node agent:
# tcpdump of the run's node address, fetched by the agent into the run's bundle.
# The HTTP payload server (payload_server.py, port 9080) serves goodput-sequence.
#
# iperf3 serves one test at a time per port, so several ports let several nodes measure
# at once (the tat experiment tries them in turn). Servers run with -J -i 0.1 so that
# the client's --get-server-output carries the receiver's 100 ms bins for uplink runs.
#
# Environment:
#   TESTBED_IPERF3_PORTS   first-last port range (default 5201-5208)
#   TESTBED_IPERF3_LOG_DIR keep each port's JSON reports here (default: discard; the
#                          client already gets the server's report)
#   TESTBED_IPERF3_STUCK_S restart an iperf3 server that holds a connection without moving
#                          a byte this long (default 60; see iperf3_watchdog.py)
#   TESTBED_SHAPE          "subnet=rate,..." e.g. "172.30.1.0/24=10mbit,172.30.2.0/24=4mbit":
#                          tbf on the interface holding an address in each subnet, so
#                          downlink runs are shaped too (needs NET_ADMIN)
#   TESTBED_SHAPE_LATENCY  tbf queue bound (default 50ms)
#   TESTBED_DITG_DIR       ITGRecv's working directory, where its receiver logs go
#                          (default /var/lib/testbed/ditg; logs older than an hour deleted)
#   TESTBED_CAPTURE_DIR    where the capture service keeps captures until their agent
#                          fetches them (default /var/lib/testbed/captures; emptied at start)
#   TESTBED_CAPTURE_LISTEN its address (default 0.0.0.0; a management address keeps it off
#                          the operators' networks: agents fetch over the control network)
#   TESTBED_CAPTURE_ARGS   more capture_service.py flags: --max-captures, --max-bytes,
#                          --max-s, --max-total-bytes, --min-free-bytes, --keep-s
set -euo pipefail

PORTS="${TESTBED_IPERF3_PORTS:-5201-5208}"
LOG_DIR="${TESTBED_IPERF3_LOG_DIR:-}"
SHAPE="${TESTBED_SHAPE:-}"
LATENCY="${TESTBED_SHAPE_LATENCY:-50ms}"
#: ABw receivers (ports 7351...), each serving one session at a time.
ABW_RECEIVERS="${TESTBED_ABW_RECEIVERS:-4}"
#: Restart an iperf3 server left idle this long mid-test (a client that vanished).
IDLE_TIMEOUT_S=120
#: ...and one that holds a connection without moving a byte this long (iperf3_watchdog.py).
STUCK_S="${TESTBED_IPERF3_STUCK_S:-60}"
#: D-ITG: ITGRecv's signalling port (D-ITG's default) and the receiver-log service.
DITG_DIR="${TESTBED_DITG_DIR:-/var/lib/testbed/ditg}"
DITG_SIGNAL_PORT=9000
DITG_LOG_PORT=9009
DITG_LOGS="${TESTBED_DITG_LOGS:-/usr/local/lib/testbed/ditg_logs.py}"
#: The server's side of each run's packet capture (capture_service.py).
CAPTURES="${TESTBED_CAPTURES:-/usr/local/lib/testbed/capture_service.py}"
CAPTURE_DIR="${TESTBED_CAPTURE_DIR:-/var/lib/testbed/captures}"
CAPTURE_LISTEN="${TESTBED_CAPTURE_LISTEN:-0.0.0.0}"
CAPTURE_PORT=9010
#: The short-flows experiment's responder: N bytes per connection, either way.
FLOW_RESPONDER="${TESTBED_FLOW_RESPONDER:-/usr/local/lib/testbed/flow_responder.py}"
FLOW_PORT="${TESTBED_FLOW_PORT:-5301}"

say() { echo "testbed-server: $*" >&2; }
die() { say "error: $*"; exit 1; }

# rate_bps RATE -> bits per second, for tc's units (bit, kbit, mbit, gbit; SI, as tc).
rate_bps() {
    local r="${1,,}" n unit
    [[ "$r" =~ ^([0-9]+(\.[0-9]+)?)([kmg]?)(bit|bps)?$ ]] || return 1
    n="${BASH_REMATCH[1]}"; unit="${BASH_REMATCH[3]}"
    case "$unit" in
        k) awk -v n="$n" 'BEGIN{printf "%d", n*1e3}' ;;
        m) awk -v n="$n" 'BEGIN{printf "%d", n*1e6}' ;;
        g) awk -v n="$n" 'BEGIN{printf "%d", n*1e9}' ;;
        *) awk -v n="$n" 'BEGIN{printf "%d", n}' ;;
    esac
}

shape() {
    local entry subnet rate bps dev burst
    IFS=',' read -ra entries <<<"$SHAPE"
    for entry in "${entries[@]}"; do
        entry="${entry// /}"
        [ -n "$entry" ] || continue
        [[ "$entry" == */*=* ]] || die "TESTBED_SHAPE entry '$entry' is not subnet=rate (e.g. 172.30.1.0/24=10mbit)"
        subnet="${entry%%=*}"; rate="${entry#*=}"
        bps="$(rate_bps "$rate")" || die "TESTBED_SHAPE entry '$entry': rate '$rate' is not a tc rate (e.g. 10mbit)"
        dev="$(ip -o -4 addr show to "$subnet" | awk '{print $2; exit}')"
        [ -n "$dev" ] || die "TESTBED_SHAPE entry '$entry': no interface has an address in $subnet ($(ip -o -4 addr show | awk '{printf "%s %s; ", $2, $4}'))"
        # Bucket: 4 ms of traffic at the rate, at least 4 KiB (a few MTU-sized packets);
        # small enough that 100 ms bins see the shaped rate, big enough for tbf's timer.
        burst=$(( bps / 8 / 250 )); [ "$burst" -ge 4096 ] || burst=4096
        tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency "$LATENCY" \
            || die "cannot shape $dev (does the container have NET_ADMIN?)"
        say "shaping egress of $dev ($subnet) to $rate, burst ${burst}B, latency $LATENCY"
    done
}

serve() {  # serve PORT: run iperf3 on PORT for ever, restarting it when it exits
    local port="$1" out=/dev/null rc
    [ -z "$LOG_DIR" ] || out="$LOG_DIR/iperf3-$port.json"
    while true; do
        rc=0
        iperf3 -s -p "$port" -J -i 0.1 --idle-timeout "$IDLE_TIMEOUT_S" >>"$out" 2>&1 || rc=$?
        say "iperf3 on port $port exited with code $rc; restarting in 1 s"
        sleep 1
    done
}

serve_abw() {  # serve_abw PORT: the ABw receiver on PORT for ever (one session at a time)
    local port="$1" rc
    while true; do
        rc=0
        abw recv --listen "0.0.0.0:$port" >/dev/null 2>&1 || rc=$?
        say "abw recv on port $port exited with code $rc; restarting in 1 s"
        sleep 1
    done
}

serve_ditg() {  # ITGRecv for ever. A sender names the receiver's log file (-x), so
    # ITGRecv runs unprivileged in its own directory: a name cannot overwrite the server.
    local rc drop=()
    if [ "$(id -u)" = 0 ]; then
        chown nobody "$DITG_DIR"
        drop=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
    fi
    while true; do
        rc=0
        (cd "$DITG_DIR" && exec "${drop[@]}" ITGRecv -Sp "$DITG_SIGNAL_PORT") \
            </dev/null >/dev/null 2>&1 || rc=$?
        say "ITGRecv exited with code $rc; restarting in 1 s"
        sleep 1
    done
}

[ -z "$SHAPE" ] || shape
[ -z "$LOG_DIR" ] || mkdir -p "$LOG_DIR"

[[ "$PORTS" =~ ^([0-9]+)-([0-9]+)$ ]] || die "TESTBED_IPERF3_PORTS '$PORTS' is not first-last"
first="${BASH_REMATCH[1]}"; last="${BASH_REMATCH[2]}"
for port in $(seq "$first" "$last"); do
    serve "$port" &
done
say "iperf3 listening on ports $first-$last"
# A client that vanishes mid-handshake leaves iperf3 blocked for ever on its port: the
# watchdog kills such a server and serve() restarts it.
WATCHDOG="${TESTBED_IPERF3_WATCHDOG:-/usr/local/lib/testbed/iperf3_watchdog.py}"
if [ -r "$WATCHDOG" ]; then
    python3 "$WATCHDOG" --stuck-s "$STUCK_S" &
    say "iperf3 watchdog: a server silent on a held connection for ${STUCK_S} s is restarted"
fi
if command -v abw >/dev/null; then
    for port in $(seq 7351 $((7350 + ABW_RECEIVERS))); do
        serve_abw "$port" &
    done
    say "abw receivers on ports 7351-$((7350 + ABW_RECEIVERS))"
else
    say "no abw binary: ABw experiments will find no receiver"
fi

if command -v ITGRecv >/dev/null; then
    mkdir -p "$DITG_DIR"
    serve_ditg &
    python3 "$DITG_LOGS" --dir "$DITG_DIR" --port "$DITG_LOG_PORT" &
    say "ITGRecv on port $DITG_SIGNAL_PORT, its receiver logs on http port $DITG_LOG_PORT"
else
    say "no ITGRecv (d-itg): D-ITG TAT steps will find no receiver"
fi

if [ -r "$CAPTURES" ] && command -v tcpdump >/dev/null; then
    # shellcheck disable=SC2086  # TESTBED_CAPTURE_ARGS is a word list
    python3 "$CAPTURES" --dir "$CAPTURE_DIR" --listen "$CAPTURE_LISTEN" --port "$CAPTURE_PORT" \
        ${TESTBED_CAPTURE_ARGS:-} &
    say "capture service on $CAPTURE_LISTEN:$CAPTURE_PORT: the server's side of each run's capture"
else
    say "no capture service (tcpdump or $CAPTURES missing): bundles get the node's capture only"
fi

if [ -r "$FLOW_RESPONDER" ]; then
    # Each flow must start from the same state: no ssthresh or RTT cached from the
    # previous connection to the same node (Garcia et al. ran with no metrics caching).
    # Compose sets it per container (docker-compose.yml); elsewhere try here.
    if [ "$(cat /proc/sys/net/ipv4/tcp_no_metrics_save 2>/dev/null)" != 1 ]; then
        sysctl -qw net.ipv4.tcp_no_metrics_save=1 2>/dev/null \
            || say "cannot set net.ipv4.tcp_no_metrics_save=1 (read-only /proc/sys): flows may reuse cached metrics"
    fi
    python3 "$FLOW_RESPONDER" --port "$FLOW_PORT" &
    say "flow responder on port $FLOW_PORT (short-flows)"
fi

# The HTTP payload responder (payload_server.py, port 9080): D bytes per connection for
# the goodput-sequence experiment's back-to-back transfers (GET down, POST up).
PAYLOAD="${TESTBED_PAYLOAD:-/usr/local/lib/testbed/payload_server.py}"
if [ -r "$PAYLOAD" ]; then
    (while true; do
        rc=0
        python3 "$PAYLOAD" --port 9080 || rc=$?
        say "payload server exited with code $rc; restarting in 1 s"
        sleep 1
    done) &
    say "HTTP payload server on port 9080 (goodput-sequence)"
else
    say "no $PAYLOAD: goodput-sequence experiments will find no payload server"
fi

stop() {
    say "stopping"
    # Everything in our process group: the supervising loops and their iperf3s.
    trap '' TERM
    kill -TERM 0 2>/dev/null || true
    exit 0
}
trap stop TERM INT
wait
