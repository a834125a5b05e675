#!/usr/bin/env bash
# Builds (and tears down) a three-namespace topology with linkem in the
# middle, the recipe documented in tools/linkem/README.md:
#
#   lkm-a-TAG (node)          lkm-r-TAG (router, runs linkem)          lkm-b-TAG (server)
#   a0 198.18.1.2/24 <--veth--> ra 198.18.1.1   rb 198.18.2.1 <--veth--> b0 198.18.2.2/24
#                                   |  lkup (TUN)  lkdn (TUN)  |
#   policy routing in lkm-r: packets that come in on ra (node -> server) go
#   to table 101 (default dev lkup); packets that come in on rb go to table
#   102 (default dev lkdn). linkem reads them from the TUN device, holds them
#   as the profile says, and writes them back to the same device; the kernel
#   then sees them arrive on lkup/lkdn, which match no rule, and routes them
#   with the main table to the other side.
#
# 198.18.0.0/15 is the range reserved for network benchmarks (RFC 2544);
# it only exists inside these namespaces.
#
# Usage:
#   netns-demo.sh up [TAG]        build the topology (TAG defaults to "demo")
#   netns-demo.sh down [TAG]      remove it (safe to call twice)
#   netns-demo.sh run [TAG] PROFILE [linkem run args...]
#                                 up + linkem in the router namespace until Ctrl-C, then down
#   netns-demo.sh direct [TAG]    bypass linkem (plain routing), for baselines
#   netns-demo.sh via-linkem [TAG] route through the TUN devices again
# Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN), iproute2 and /dev/net/tun.
set -euo pipefail

cmd=${1:-}
tag=${2:-demo}
A=lkm-a-$tag
R=lkm-r-$tag
B=lkm-b-$tag
here=$(cd "$(dirname "$0")" && pwd)

down() {
    for ns in "$A" "$R" "$B"; do
        ip netns del "$ns" 2>/dev/null || true
    done
}

via_linkem() {
    ip -n "$R" rule add iif ra lookup 101 pref 1001
    ip -n "$R" rule add iif rb lookup 102 pref 1002
}

direct() {
    ip -n "$R" rule del pref 1001 2>/dev/null || true
    ip -n "$R" rule del pref 1002 2>/dev/null || true
}

up() {
    down
    ip netns add "$A"
    ip netns add "$R"
    ip netns add "$B"
    ip -n "$A" link add a0 type veth peer name ra netns "$R"
    ip -n "$B" link add b0 type veth peer name rb netns "$R"
    for ns in "$A" "$R" "$B"; do
        ip -n "$ns" link set lo up
    done
    ip -n "$A" addr add 198.18.1.2/24 dev a0
    ip -n "$A" link set a0 up
    ip -n "$A" route add default via 198.18.1.1
    ip -n "$B" addr add 198.18.2.2/24 dev b0
    ip -n "$B" link set b0 up
    ip -n "$B" route add default via 198.18.2.1
    ip -n "$R" addr add 198.18.1.1/24 dev ra
    ip -n "$R" addr add 198.18.2.1/24 dev rb
    ip -n "$R" link set ra up
    ip -n "$R" link set rb up
    # Persistent TUN devices: routes to them survive restarts of linkem.
    ip -n "$R" tuntap add mode tun name lkup
    ip -n "$R" tuntap add mode tun name lkdn
    for dev in lkup lkdn; do
        # Keep IPv6 autoconfiguration chatter out of the emulated link.
        ip netns exec "$R" sysctl -qw "net.ipv6.conf.$dev.disable_ipv6=1"
        ip -n "$R" link set "$dev" up
        # Packets written to lkup carry the node's source address, whose
        # reverse path is ra, not lkup: strict reverse-path filtering would
        # drop them.
        ip netns exec "$R" sysctl -qw "net.ipv4.conf.$dev.rp_filter=0"
    done
    ip netns exec "$R" sysctl -qw net.ipv4.ip_forward=1
    ip netns exec "$R" sysctl -qw net.ipv4.conf.all.rp_filter=0
    ip netns exec "$R" sysctl -qw net.ipv4.conf.default.rp_filter=0
    ip -n "$R" route add default dev lkup table 101
    ip -n "$R" route add default dev lkdn table 102
    via_linkem
    # Each TCP transfer starts afresh (no cached ssthresh/RTT between runs),
    # as on a node whose connections are minutes apart.
    for ns in "$A" "$B"; do
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_no_metrics_save=1
    done
    echo "node: $A (198.18.1.2)  router: $R (run linkem here)  server: $B (198.18.2.2)"
}

case "$cmd" in
up) up ;;
down) down ;;
direct) direct ;;
via-linkem) via_linkem ;;
run)
    profile=${3:?usage: netns-demo.sh run TAG PROFILE [linkem run args...]}
    shift 3
    up
    trap down EXIT
    linkem=${LINKEM:-$here/../../target/release/linkem}
    ip netns exec "$R" "$linkem" run --profile "$profile" --uplink-tun lkup --downlink-tun lkdn "$@"
    ;;
*)
    sed -n '2,31p' "$0"
    exit 2
    ;;
esac
