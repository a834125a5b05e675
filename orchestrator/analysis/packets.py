"""Link, network and transport headers of captured frames, decoded to :class:`Packet`.

Captures are headers-only (snaplen 96), so every length comes from the IP header, never
from how many bytes were captured: a 1514-byte frame captured as 96 bytes still counts
1448 payload bytes. Link layers are the ones the platform meets: Ethernet (with VLAN
tags) on wired nodes and servers, Linux cooked v1/v2 from ``tcpdump -i any``, and raw IP
from modems' point-to-point interfaces and the TUN-based link emulator. Link-type
numbers are from https://www.tcpdump.org/linktypes.html.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

LINKTYPE_NULL = 0  # BSD loopback: 4-byte address family, host order
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW_DLT12 = 12  # DLT_RAW as some systems number it
LINKTYPE_RAW_DLT14 = 14  # DLT_RAW on OpenBSD
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108  # OpenBSD loopback: 4-byte address family, network order
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276

#: Bytes before the network header for link types without an ethertype to follow.
_FIXED_HEADER = {
    LINKTYPE_NULL: 4,
    LINKTYPE_LOOP: 4,
    LINKTYPE_RAW: 0,
    LINKTYPE_RAW_DLT12: 0,
    LINKTYPE_RAW_DLT14: 0,
    LINKTYPE_IPV4: 0,
    LINKTYPE_IPV6: 0,
}
_VLAN = (0x8100, 0x88A8, 0x9100)  # 802.1Q, 802.1ad and the old QinQ tag
_IPV4, _IPV6 = 0x0800, 0x86DD
TCP, UDP = 6, 17
# IPv6 extension headers with the generic (next, length in 8-byte units - 1) layout.
_IPV6_EXT = (0, 43, 60)
_IPV6_FRAGMENT = 44

# TCP flag bits (RFC 9293 section 3.1).
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

_U16 = struct.Struct("!H")
_IPV4_HDR = struct.Struct("!BxHxxHxB")  # version/ihl, total length, flags/frag, protocol
_IPV6_HDR = struct.Struct("!xxxxHB")  # payload length, next header
_TCP_HDR = struct.Struct("!HHIIBBH")  # ports, seq, ack, data offset, flags, window
_UDP_HDR = struct.Struct("!HHH")


class Packet(NamedTuple):
    """One IP packet's headers. Addresses are the raw 4 or 16 bytes."""

    ts_ns: int
    src: bytes
    dst: bytes
    proto: int
    sport: int
    dport: int
    ip_len: int  # bytes on the wire from the IP header on (IP total length)
    payload: int  # transport payload bytes, from the IP lengths (not the captured bytes)
    seq: int = 0
    ack: int = 0
    flags: int = 0
    window: int = 0


def network_offset(data: bytes, linktype: int, start: int, end: int) -> int | None:
    """Offset of the IP header, or None for frames that carry no IP."""
    fixed = _FIXED_HEADER.get(linktype)
    if fixed is not None:
        return start + fixed
    if linktype == LINKTYPE_ETHERNET:
        at, l3 = start + 12, start + 14
        if l3 > end:
            return None
        ethertype = _U16.unpack_from(data, at)[0]
        while ethertype in _VLAN and l3 + 4 <= end:
            ethertype = _U16.unpack_from(data, l3 + 2)[0]
            l3 += 4
    elif linktype == LINKTYPE_LINUX_SLL:
        if start + 16 > end:
            return None
        ethertype, l3 = _U16.unpack_from(data, start + 14)[0], start + 16
    elif linktype == LINKTYPE_LINUX_SLL2:
        if start + 20 > end:
            return None
        ethertype, l3 = _U16.unpack_from(data, start)[0], start + 20
    else:
        return None
    return l3 if ethertype in (_IPV4, _IPV6) else None


def decode(
    data: bytes, ts_ns: int, linktype: int, start: int, caplen: int, orig_len: int
) -> Packet | None:
    """Decode the frame ``data[start:start + caplen]``; None if it carries no usable IP.

    A transport header cut off by the snapshot length leaves the ports and TCP fields 0;
    a non-first IPv4 fragment has no transport header at all (ports 0, payload the rest).
    """
    end = start + caplen
    l3 = network_offset(data, linktype, start, end)
    if l3 is None or l3 + 20 > end:
        return None
    version = data[l3] >> 4
    if version == 4:
        vihl, total, frag, proto = _IPV4_HDR.unpack_from(data, l3)
        ihl = (vihl & 0x0F) * 4
        if total == 0:  # TSO super-packet captured before segmentation
            total = orig_len - (l3 - start)
        src, dst = data[l3 + 12 : l3 + 16], data[l3 + 16 : l3 + 20]
        l4 = l3 + ihl
        l4_len = total - ihl
        if frag & 0x1FFF:  # a later fragment: payload only
            return Packet(ts_ns, src, dst, proto, 0, 0, total, l4_len)
    elif version == 6:
        if l3 + 40 > end:
            return None
        payload_len, proto = _IPV6_HDR.unpack_from(data, l3)
        total = 40 + payload_len
        src, dst = data[l3 + 8 : l3 + 24], data[l3 + 24 : l3 + 40]
        l4 = l3 + 40
        l4_len = payload_len
        while (proto in _IPV6_EXT or proto == _IPV6_FRAGMENT) and l4 + 8 <= end:
            ext = 8 if proto == _IPV6_FRAGMENT else (data[l4 + 1] + 1) * 8
            proto = data[l4]
            l4 += ext
            l4_len -= ext
    else:
        return None
    if proto == TCP and l4 + 20 <= end:
        sport, dport, seq, ack, doff, flags, window = _TCP_HDR.unpack_from(data, l4)
        return Packet(
            ts_ns,
            src,
            dst,
            proto,
            sport,
            dport,
            total,
            max(0, l4_len - (doff >> 4) * 4),
            seq,
            ack,
            flags,
            window,
        )
    if proto == UDP and l4 + 8 <= end:
        sport, dport, _udp_len = _UDP_HDR.unpack_from(data, l4)
        return Packet(ts_ns, src, dst, proto, sport, dport, total, max(0, l4_len - 8))
    return Packet(ts_ns, src, dst, proto, 0, 0, total, max(0, l4_len))
