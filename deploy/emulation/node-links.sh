#!/bin/sh
# Emulated modems for a fleet node container, then the agent.
#
# Each operator network arrives as a plain ethN whose number depends on the order Docker
# attaches networks, so interfaces are found by subnet and renamed to the names the agent
# config uses (op0, op1, ... as MONROE's experiment namespace). Then each gets its own
# link emulator (tools/linkem) with an operator profile, both directions, inside this
# container's network namespace: the experiment containers that join it
# (--net=container:...) see the emulated link on opN, and a restart of the container
# rebuilds everything (the namespace, its TUN devices and routes are new each start).
#
#   TESTBED_LINKS="op0=172.30.1.0/24=/profiles/se-telia-fleet.yaml op1=172.30.2.0/24=..."
#
# name=subnet=profile per SIM. A rate instead of a profile (op0=172.30.1.0/24=10mbit)
# falls back to tbf on the uplink only (hosts without /dev/net/tun). `host` instead
# (op0=172.30.2.0/24=host) only names the interface: its tbf is set from the host, for
# a node whose tc cannot run in its container (the arm64 node under qemu-user, which
# does not emulate tc's netlink messages: scripts/up-arm64).
#
# Wiring of SIM i on interface opN with address A in subnet S (one namespace, no veth):
#
#   uplink    local socket -> rule "iif lo to S" (pref 200+i) -> table 200+i: default dev
#             lkupI src A -> linkem -> written back into lkupI -> forwarded (main table)
#             out of opN. Needs ip_forward=1, rp_filter 0 and accept_local 1 on lkupI.
#   downlink  opN ingress: tc u32 "ip dst A" -> mirred redirect to lkdnI's egress ->
#             linkem -> written back into lkdnI -> delivered locally to A.
#
#   run       a confined run (node-image/node_agent/runnet.py) arrives on its veth
#             tbrunI, is routed into lkupI too (its own rule and table) with source
#             NAT to A, and comes back on lkdnI, where conntrack gives it its inner
#             address back. What re-enters from lkupI is not tracked again (notrack):
#             its conntrack entry would clash with the first pass's NATed one and the
#             packet would be dropped. And what re-enters from lkupI leaves by opN
#             only: a run on op0 that sends to op1's server goes through op0's link
#             and stops here, never out of op1 (table inet testbed_linkem).
#
# The downlink is steered with tc rather than a policy rule before the local table: a
# rule "iif opN lookup <lkdn table>" also catches the ARP requests for A (ARP asks the
# routing table whether A is local), so the node would stop answering ARP on opN. tc
# matches IPv4 only and leaves ARP, broadcasts and other nodes' traffic alone. Sockets
# bound to opN by device only (SO_BINDTODEVICE without an address) bypass the uplink
# emulator; experiments bind the interface address (TESTBED_INTERFACE_ADDRESS).
#
# The namespace's sysctls must be set by whoever creates it (/proc/sys is read-only in
# a container; docker-compose.yml sets them): net.ipv4.ip_forward=1,
# net.ipv4.conf.{all,default}.rp_filter=0, net.ipv4.conf.default.accept_local=1.
#
# Each linkem runs under a small supervisor loop (restarted if it exits) and publishes
# its link state to $TESTBED_LINKEM_STATE_DIR/<name>.json (default /run/linkem/op0.json)
# every 200 ms, for an emulated modem reader.
#
# Environment: TESTBED_LINKS, TESTBED_LINKEM (binary, default linkem),
# TESTBED_LINKEM_STATE_DIR (default /run/linkem), TESTBED_LINKEM_ARGS (extra
# `linkem run` flags, e.g. "--state-interval-ms 500"), TESTBED_DIURNAL_ANCHOR (an RFC
# 3339 instant: diurnal profiles run their compressed clock from it, --diurnal-anchor;
# default: each linkem's own start).
set -eu

LINKEM="${TESTBED_LINKEM:-linkem}"
STATE_DIR="${TESTBED_LINKEM_STATE_DIR:-/run/linkem}"
#: Rule preferences and routing tables: uplink of SIM i in table UP_BASE+i.
UP_BASE=200

say() { echo "node-links: $*" >&2; }
die() { say "error: $*"; exit 1; }

sysctl_is() {  # sysctl_is KEY VALUE: the namespace's setting is VALUE
    [ "$(cat "/proc/sys/net/ipv4/$1" 2>/dev/null)" = "$2" ]
}

check_sysctls() {
    missing=""
    sysctl_is ip_forward 1 || missing="$missing net.ipv4.ip_forward=1"
    sysctl_is conf/all/rp_filter 0 || missing="$missing net.ipv4.conf.all.rp_filter=0"
    sysctl_is conf/default/rp_filter 0 || missing="$missing net.ipv4.conf.default.rp_filter=0"
    sysctl_is conf/default/accept_local 1 || missing="$missing net.ipv4.conf.default.accept_local=1"
    [ -z "$missing" ] || die "the link emulator needs these sysctls in the node's namespace (compose: sysctls:):$missing"
    [ -c /dev/net/tun ] || die "no /dev/net/tun in the container (compose: devices: [/dev/net/tun:/dev/net/tun])"
    command -v "$LINKEM" >/dev/null || die "no $LINKEM binary in the image (scripts/build-images.sh node)"
    command -v nft >/dev/null || die "no nft in the image (package nftables)"
}

shape_tbf() {  # shape_tbf NAME RATE: the old uplink-only fallback
    bps=$(echo "$2" | awk '/mbit$/{sub(/mbit/,"");print $0*1000000;next}/kbit$/{sub(/kbit/,"");print $0*1000;next}{print $0}')
    # Bucket of 4 ms at the rate (>= 4 KiB): 100 ms bins see the shaped rate.
    burst=$(awk -v b="$bps" 'BEGIN{x=int(b/8/250); if (x<4096) x=4096; print x}')
    tc qdisc replace dev "$1" root tbf rate "$2" burst "$burst" latency 50ms
    say "$1: uplink $2 (tbf)"
}

guard_reentry() {  # guard_reentry UPTUN NAME: see "run" above
    nft add table inet testbed_linkem
    nft add chain inet testbed_linkem reentry_notrack \
        '{ type filter hook prerouting priority -300; policy accept; }'
    nft add chain inet testbed_linkem reentry_leaves \
        '{ type filter hook forward priority 0; policy accept; }'
    nft add rule inet testbed_linkem reentry_notrack iifname "$1" notrack
    nft add rule inet testbed_linkem reentry_leaves iifname "$1" oifname != "$2" drop
}

supervise() {  # supervise NAME PROFILE UPTUN DNTUN: linkem for ever, restarted on exit
    # shellcheck disable=SC2086  # TESTBED_LINKEM_ARGS is a word list
    while true; do
        rc=0
        "$LINKEM" run --profile "$2" --uplink-tun "$3" --downlink-tun "$4" \
            --state-file "$STATE_DIR/$1.json" ${TESTBED_LINKEM_ARGS:-} \
            ${TESTBED_DIURNAL_ANCHOR:+--diurnal-anchor "$TESTBED_DIURNAL_ANCHOR"} || rc=$?
        say "$1: linkem exited with code $rc; restarting in 1 s"
        sleep 1
    done
}

emulate() {  # emulate INDEX NAME SUBNET PROFILE
    i=$1; name=$2; subnet=$3; profile=$4
    [ -r "$profile" ] || die "$name: cannot read profile $profile (is deploy/profiles mounted?)"
    "$LINKEM" check "$profile" >/dev/null || die "$name: $profile is not a valid linkem profile"
    addr=$(ip -o -4 addr show dev "$name" to "$subnet" | awk '{split($4, a, "/"); print a[1]; exit}')
    up="lkup$i"; dn="lkdn$i"; table=$((UP_BASE + i))
    # Persistent TUN devices: routes and filters survive a linkem restart.
    for tun in "$up" "$dn"; do
        ip link show "$tun" >/dev/null 2>&1 || ip tuntap add mode tun name "$tun"
        ip link set "$tun" up
    done
    # Uplink: locally originated packets to the operator network go into lkupI first.
    ip route replace default dev "$up" src "$addr" table "$table"
    ip rule del pref "$table" 2>/dev/null || true
    ip rule add pref "$table" iif lo to "$subnet" lookup "$table"
    # Downlink: IPv4 for our address arriving on opN goes into lkdnI first.
    tc qdisc del dev "$name" ingress 2>/dev/null || true
    tc qdisc add dev "$name" handle ffff: ingress
    tc filter add dev "$name" parent ffff: protocol ip prio 1 u32 match ip dst "$addr/32" \
        action mirred egress redirect dev "$dn"
    guard_reentry "$up" "$name"
    supervise "$name" "$profile" "$up" "$dn" &
    # Ready when linkem has published its first state.
    tries=0
    while [ ! -s "$STATE_DIR/$name.json" ]; do
        tries=$((tries + 1))
        [ "$tries" -le 50 ] || die "$name: linkem published no state in 5 s"
        sleep 0.1
    done
    say "$name ($addr in $subnet): linkem $profile via $up/$dn, state $STATE_DIR/$name.json"
}

i=0
checked=0
for link in ${TESTBED_LINKS:-}; do
    name=${link%%=*}; rest=${link#*=}; subnet=${rest%%=*}; target=${rest#*=}
    [ "$name" != "$link" ] && [ "$subnet" != "$rest" ] \
        || die "TESTBED_LINKS entry '$link' is not name=subnet=profile"
    dev=$(ip -o -4 addr show to "$subnet" | awk '{print $2; exit}')
    [ -n "$dev" ] \
        || die "no interface in $subnet for $name; addresses: $(ip -o -4 addr show | awk '{printf "%s %s; ", $2, $4}')"
    if [ "$dev" != "$name" ]; then
        ip link set "$dev" down
        ip link set "$dev" name "$name"
        ip link set "$name" up
        say "$dev -> $name ($subnet)"
    fi
    case "$target" in
        *[0-9]bit|*[0-9]kbit|*[0-9]mbit|*[0-9]gbit) shape_tbf "$name" "$target" ;;
        host) say "$name ($subnet): shaped from the host" ;;
        *)
            if [ "$checked" = 0 ]; then check_sysctls; mkdir -p "$STATE_DIR"; checked=1; fi
            emulate "$i" "$name" "$subnet" "$target"
            ;;
    esac
    i=$((i + 1))
done
exec "$@"
