"""Captures rewritten for publication: addresses anonymised, payloads gone.

Each IP packet of a pcap or pcapng file is kept from its IP header to the end of its
transport header (TCP with its options, UDP, the 8 bytes of an ICMP header) and no
further: nodes capture headers only already (tcpdump ``-s 96``), and cutting at the
headers drops what is left of payloads, and the packet an ICMP error quotes (which
would carry the original addresses). Source and destination addresses go through the
release's Crypto-PAn (:mod:`.anonymise`), the IPv4 header checksum is computed again,
IPv4 options and IPv6 routing headers (which may name addresses) are blanked. Frames
that carry no IP (ARP, which names addresses too) are left out, and the link-layer
header with its MAC addresses goes: the output is a classic pcap of raw IP
(LINKTYPE_RAW), nanosecond timestamps, little-endian, which the testbed's own reader
and every pcap tool read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from orchestrator.analysis.packets import TCP, UDP, network_offset
from orchestrator.analysis.pcap import CaptureError, iter_frames
from orchestrator.dataset.anonymise import Anonymiser

LINKTYPE_RAW = 101
#: pcap global header: nanosecond magic, version 2.4, snaplen, LINKTYPE_RAW.
_HEADER = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, LINKTYPE_RAW)
_RECORD = struct.Struct("<IIII")
_ICMP, _ICMPV6 = 1, 58
_IPV6_ROUTING = 43
_IPV6_SKIPPED = (0, 43, 60, 44)  # hop-by-hop, routing, destination options, fragment


@dataclass(frozen=True)
class AnonymisedCapture:
    data: bytes
    packets: int  # IP packets kept
    dropped: int  # frames left out: no IP, or IP headers cut off by the capture
    damage: str | None  # where reading stopped, when the file was cut short


def _checksum(header: bytes) -> int:
    total: int = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _transport_end(packet: bytearray, l4: int, proto: int) -> int:
    """Where the transport header ends (within what was captured)."""
    end = len(packet)
    if proto == TCP and l4 + 13 <= end:
        return min(end, l4 + max(20, (packet[l4 + 12] >> 4) * 4))
    if proto in (UDP, _ICMP, _ICMPV6):
        return min(end, l4 + 8)
    return min(end, l4)


def _ipv4(packet: bytearray, anon: Anonymiser) -> bytearray | None:
    ihl = (packet[0] & 0x0F) * 4
    if ihl < 20 or len(packet) < ihl:
        return None
    packet[12:16] = anon.packed(bytes(packet[12:16]))
    packet[16:20] = anon.packed(bytes(packet[16:20]))
    packet[20:ihl] = b"\x01" * (ihl - 20)  # options: no-operations
    fragment = struct.unpack_from("!H", packet, 6)[0] & 0x1FFF
    end = ihl if fragment else _transport_end(packet, ihl, packet[9])
    packet[10:12] = b"\x00\x00"
    packet[10:12] = struct.pack("!H", _checksum(bytes(packet[:ihl])))
    return packet[:end]


def _ipv6(packet: bytearray, anon: Anonymiser) -> bytearray | None:
    if len(packet) < 40:
        return None
    packet[8:24] = anon.packed(bytes(packet[8:24]))
    packet[24:40] = anon.packed(bytes(packet[24:40]))
    proto, l4 = packet[6], 40
    while proto in _IPV6_SKIPPED and l4 + 8 <= len(packet):
        size = 8 if proto == 44 else (packet[l4 + 1] + 1) * 8
        if proto == _IPV6_ROUTING:
            packet[l4 + 8 : l4 + size] = bytes(len(packet[l4 + 8 : l4 + size]))
        proto = packet[l4]
        l4 += size
    if l4 > len(packet):
        return packet[:40]
    return packet[:_transport_end(packet, l4, proto)]


def anonymise_capture(data: bytes, anon: Anonymiser) -> AnonymisedCapture:
    """The capture ``data`` (pcap or pcapng) rewritten for publication; a damaged file
    gives the packets before the damage and says where it stopped. Raises
    :class:`CaptureError` for a file that is no capture at all."""
    out = [_HEADER]
    kept = dropped = 0
    damage: str | None = None
    try:
        for frame in iter_frames(data):
            end = frame.start + frame.caplen
            l3 = network_offset(data, frame.linktype, frame.start, end)
            if l3 is None or l3 >= end:
                dropped += 1
                continue
            packet = bytearray(data[l3:end])
            version = packet[0] >> 4
            rewritten = (_ipv4(packet, anon) if version == 4 and len(packet) >= 20
                         else _ipv6(packet, anon) if version == 6 else None)
            if rewritten is None:
                dropped += 1
                continue
            seconds, ns = divmod(frame.ts_ns, 1_000_000_000)
            wire = max(len(rewritten), frame.orig_len - (l3 - frame.start))
            out.append(_RECORD.pack(seconds & 0xFFFFFFFF, ns, len(rewritten), wire))
            out.append(bytes(rewritten))
            kept += 1
    except CaptureError as e:
        if e.offset == 0 and e.packets_read == 0 and kept == 0 and dropped == 0:
            raise
        damage = str(e)
    return AnonymisedCapture(data=b"".join(out), packets=kept, dropped=dropped, damage=damage)
