"""Packet-capture files (pcap and pcapng) read from bytes, in pure Python.

Nodes capture headers only (tcpdump ``-s 96``) to keep bundles small, and bundles
arrive cut short now and then (a capture still being written when the container was
killed at its data reservation, a copy interrupted), so the reader must say exactly
where a file is damaged and still hand back the packets before the damage when asked.
It needs no libpcap, tshark or dpkt, so the ingest service and a rebuild from the raw
archive run anywhere the orchestrator runs.

Formats: the pcap file format (microsecond and nanosecond magic, either byte order;
https://www.ietf.org/archive/id/draft-ietf-opsawg-pcap-03.html) and pcapng (section
header, interface description, enhanced / simple / obsolete packet blocks, several
interfaces and sections; draft-ietf-opsawg-pcapng-01). Link layers are decoded in
:mod:`orchestrator.analysis.packets`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from orchestrator.analysis.packets import Packet, decode
from orchestrator.errors import Invalid

# pcap global header magic numbers, read little-endian (draft-ietf-opsawg-pcap section 4).
_PCAP_MAGIC = {
    0xA1B2C3D4: ("<", 1000),  # microsecond timestamps, little-endian file
    0xD4C3B2A1: (">", 1000),
    0xA1B23C4D: ("<", 1),  # nanosecond timestamps
    0x4D3CB2A1: (">", 1),
}
_PCAPNG_SHB = 0x0A0D0D0A  # section header block type (palindromic: same both orders)
_PCAPNG_BOM = 0x1A2B3C4D  # byte-order magic inside the section header
_PCAP_HEADER = 24
_RECORD_HEADER = 16
#: Largest record a sane capture holds: libpcap's MAXIMUM_SNAPLEN (262144) with room for
#: captures from other tools; anything bigger is a corrupt length field, not a packet.
_MAX_RECORD = 1 << 20
#: Largest pcapng block the reader reads (interface descriptions and packets): a record
#: and room for its options. The compiled reader holds a block whole, so a longer one
#: is a corrupt length field, refused as damage in both.
_MAX_BLOCK = 2 * _MAX_RECORD
#: Timestamps are clamped to +-146 years around 1970 (a pcapng if_tsoffset can move them
#: anywhere): the compiled tool's 64-bit times then never overflow, even as differences.
_MAX_TS_NS = (1 << 62) - 1
# pcapng option code if_tsresol and if_tsoffset (pcapng draft section 4.2).
_OPT_TSRESOL = 9
_OPT_TSOFFSET = 14


class CaptureError(Invalid):
    """A capture that cannot be read (further); says where and what to do."""

    def __init__(self, message: str, *, offset: int, packets_read: int) -> None:
        super().__init__(message)
        self.offset = offset
        self.packets_read = packets_read


class Frame(NamedTuple):
    """One captured frame: ``data[start:start + caplen]`` of the file's bytes."""

    ts_ns: int
    linktype: int
    start: int
    caplen: int
    orig_len: int


@dataclass(frozen=True)
class Capture:
    """What a capture file held: decoded IP packets plus how much was not decodable."""

    format: str  # "pcap" or "pcapng"
    linktypes: tuple[int, ...]
    snaplen: int  # the first interface's snapshot length (0: unlimited)
    packets: list[Packet]
    frames: int  # frames read, including those that are not IP
    undecoded: int  # frames that are not IPv4/IPv6 or whose headers were cut off
    damage: CaptureError | None = field(default=None)  # set when strict=False stopped early


def read_capture(data: bytes, *, strict: bool = True) -> Capture:
    """Decode every packet of a pcap or pcapng file.

    With ``strict`` a damaged file raises :class:`CaptureError`; without it the packets
    before the damage are returned and ``damage`` says where reading stopped.
    """
    kind = capture_format(data)
    packets: list[Packet] = []
    linktypes: list[int] = []
    frames = undecoded = 0
    damage: CaptureError | None = None
    snaplen = _snaplen(data) if kind == "pcap" else 0
    try:
        for frame in iter_frames(data):
            frames += 1
            if frame.linktype not in linktypes:
                linktypes.append(frame.linktype)
            packet = decode(
                data, frame.ts_ns, frame.linktype, frame.start, frame.caplen, frame.orig_len
            )
            if packet is None:
                undecoded += 1
            else:
                packets.append(packet)
    except CaptureError as e:
        if strict:
            raise
        damage = e
    return Capture(
        format=kind,
        linktypes=tuple(linktypes),
        snaplen=snaplen,
        packets=packets,
        frames=frames,
        undecoded=undecoded,
        damage=damage,
    )


def capture_format(data: bytes) -> str:
    """``"pcap"`` or ``"pcapng"``, from the first four bytes."""
    if len(data) >= 4:
        (magic,) = struct.unpack_from("<I", data, 0)
        if magic in _PCAP_MAGIC:
            return "pcap"
        if magic == _PCAPNG_SHB:
            return "pcapng"
    raise CaptureError(
        f"not a pcap or pcapng file (starts with {bytes(data[:4]).hex() or 'nothing'}); "
        "write captures with tcpdump -w or dumpcap",
        offset=0,
        packets_read=0,
    )


def iter_frames(data: bytes) -> Iterator[Frame]:
    """Every frame in file order; raises :class:`CaptureError` where the file is damaged."""
    if capture_format(data) == "pcap":
        yield from _pcap_frames(data)
    else:
        yield from _pcapng_frames(data)


def _truncated(data: bytes, offset: int, n: int, what: str, need: int) -> CaptureError:
    return CaptureError(
        f"capture truncated at byte {offset} of {len(data)}: {what} of packet {n + 1} needs "
        f"{need} bytes, {len(data) - offset} left. The file was cut short (a capture still "
        f"being written, or an interrupted copy); read it with strict=False to keep the "
        f"{n} packets before the damage",
        offset=offset,
        packets_read=n,
    )


def _snaplen(data: bytes) -> int:
    if len(data) < _PCAP_HEADER:
        return 0
    order, _ = _PCAP_MAGIC[struct.unpack_from("<I", data, 0)[0]]
    return int(struct.unpack_from(order + "I", data, 16)[0])


def _pcap_frames(data: bytes) -> Iterator[Frame]:
    end = len(data)
    if end < _PCAP_HEADER:
        raise CaptureError(
            f"pcap file header truncated: {end} of {_PCAP_HEADER} bytes; the file is empty "
            "or was cut before the first packet",
            offset=0,
            packets_read=0,
        )
    order, scale = _PCAP_MAGIC[struct.unpack_from("<I", data, 0)[0]]
    network = struct.unpack_from(order + "I", data, 20)[0]
    linktype = network & 0x0FFFFFFF  # upper bits carry FCS length (pcap draft 4)
    record = struct.Struct(order + "IIII")
    offset = _PCAP_HEADER
    n = 0
    while offset < end:
        if offset + _RECORD_HEADER > end:
            raise _truncated(data, offset, n, "the record header", _RECORD_HEADER)
        sec, frac, caplen, orig_len = record.unpack_from(data, offset)
        if caplen > _MAX_RECORD:
            raise CaptureError(
                f"capture damaged at byte {offset}: packet {n + 1} claims {caplen} bytes, "
                f"more than any capture holds; read it with strict=False to keep the {n} "
                "packets before the damage",
                offset=offset,
                packets_read=n,
            )
        start = offset + _RECORD_HEADER
        if start + caplen > end:
            raise _truncated(data, offset, n, "the record", _RECORD_HEADER + caplen)
        yield Frame(sec * 1_000_000_000 + frac * scale, linktype, start, caplen, orig_len)
        offset = start + caplen
        n += 1


class _Interface(NamedTuple):
    linktype: int
    snaplen: int
    units_per_s: int  # timestamp units per second (if_tsresol)
    offset_s: int  # if_tsoffset


def _ts_ns(ts: int, iface: _Interface) -> int:
    units = iface.units_per_s
    ns = ts * 1_000_000_000 // units if units != 1_000_000_000 else ts
    return max(-_MAX_TS_NS, min(_MAX_TS_NS, ns + iface.offset_s * 1_000_000_000))


def _interface(data: bytes, order: str, body: int, block_end: int) -> _Interface:
    linktype, _reserved, snaplen = struct.unpack_from(order + "HHI", data, body)
    units, offset_s = 1_000_000, 0  # default resolution: microseconds
    opt = body + 8
    while opt + 4 <= block_end:
        code, length = struct.unpack_from(order + "HH", data, opt)
        if code == 0:
            break
        value = opt + 4
        if code == _OPT_TSRESOL and length >= 1:
            res = data[value]
            units = 2 ** (res & 0x7F) if res & 0x80 else 10**res
        elif code == _OPT_TSOFFSET and length >= 8:
            offset_s = struct.unpack_from(order + "q", data, value)[0]
        opt = value + (length + 3) // 4 * 4
    return _Interface(linktype, snaplen, units, offset_s)


def _pcapng_frames(data: bytes) -> Iterator[Frame]:
    end = len(data)
    offset = 0
    n = 0
    order = "<"
    interfaces: list[_Interface] = []
    while offset < end:
        if offset + 12 > end:
            raise _truncated(data, offset, n, "the block header", 12)
        (btype,) = struct.unpack_from(order + "I", data, offset)
        if btype == _PCAPNG_SHB:
            (bom,) = struct.unpack_from("<I", data, offset + 8)
            if bom == _PCAPNG_BOM:
                order = "<"
            elif bom == 0x4D3C2B1A:
                order = ">"
            else:
                raise CaptureError(
                    f"pcapng section at byte {offset} has no valid byte-order magic; the "
                    f"file is damaged after {n} packets (strict=False keeps them)",
                    offset=offset,
                    packets_read=n,
                )
            interfaces = []  # interface ids are per section
        (length,) = struct.unpack_from(order + "I", data, offset + 4)
        if length < 12 or length % 4:
            raise CaptureError(
                f"capture damaged at byte {offset}: pcapng block length {length} is not a "
                f"multiple of 4 of at least 12; read it with strict=False to keep the {n} "
                "packets before the damage",
                offset=offset,
                packets_read=n,
            )
        if length > _MAX_BLOCK and btype in (1, 2, 3, 6):
            raise CaptureError(
                f"capture damaged at byte {offset}: pcapng block length {length} is more than "
                f"any capture holds; read it with strict=False to keep the {n} packets before "
                "the damage",
                offset=offset,
                packets_read=n,
            )
        if offset + length > end:
            raise _truncated(data, offset, n, "the pcapng block", length)
        body = offset + 8
        block_end = offset + length - 4
        if btype == 1:  # interface description block
            interfaces.append(_interface(data, order, body, block_end))
        elif btype in (6, 2):  # enhanced packet block, obsolete packet block
            if btype == 6:
                iface_id, hi, lo, caplen, orig_len = struct.unpack_from(order + "IIIII", data, body)
            else:
                iface_id, _drops, hi, lo, caplen, orig_len = struct.unpack_from(
                    order + "HHIIII", data, body
                )
            if iface_id >= len(interfaces) or body + 20 + caplen > block_end:
                raise CaptureError(
                    f"capture damaged at byte {offset}: packet {n + 1} names interface "
                    f"{iface_id} of {len(interfaces)} or overruns its block; strict=False "
                    f"keeps the {n} packets before the damage",
                    offset=offset,
                    packets_read=n,
                )
            iface = interfaces[iface_id]
            yield Frame(_ts_ns((hi << 32) | lo, iface), iface.linktype, body + 20, caplen, orig_len)
            n += 1
        elif btype == 3:  # simple packet block: interface 0, no timestamp
            if not interfaces:
                raise CaptureError(
                    f"capture damaged at byte {offset}: a simple packet block before any "
                    "interface description",
                    offset=offset,
                    packets_read=n,
                )
            (orig_len,) = struct.unpack_from(order + "I", data, body)
            iface = interfaces[0]
            caplen = min(orig_len, block_end - body - 4)
            if iface.snaplen:
                caplen = min(caplen, iface.snaplen)
            yield Frame(0, iface.linktype, body + 4, caplen, orig_len)
            n += 1
        offset += length
