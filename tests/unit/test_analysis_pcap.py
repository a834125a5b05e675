"""The capture reader on real captures and on their framing rewritten byte by byte.

Fixtures (``record-iperf3-pcap.sh`` beside them): a 3 s iperf3 uplink through a tbf
bottleneck of 6 Mbit/s between network namespaces, tcpdump headers-only (snaplen 96):
``tcp-6mbit-rx.pcap`` receiver side (Ethernet), ``tcp-6mbit-tx.pcap`` sender side,
``tcp-6mbit-any.pcap`` the first 200 packets on ``-i any`` (Linux cooked v2) and
``tcp-6mbit-any.pcapng`` the same written by editcap as pcapng.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from orchestrator.analysis.packets import LINKTYPE_LINUX_SLL, LINKTYPE_RAW, TCP
from orchestrator.analysis.pcap import CaptureError, iter_frames, read_capture
from orchestrator.errors import Invalid

FIXTURES = Path(__file__).parent / "fixtures"


def _bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def test_headers_only_ethernet_capture_keeps_real_payload_lengths() -> None:
    cap = read_capture(_bytes("tcp-6mbit-rx.pcap"))
    assert (cap.format, cap.linktypes, cap.snaplen) == ("pcap", (1,), 96)
    assert cap.undecoded == 0 and cap.frames == len(cap.packets) == 1841
    data = [p for p in cap.packets if p.proto == TCP and p.payload > 0 and p.dport == 5201]
    # 1514-byte frames captured as 96 bytes still carry their 1448-byte segment (and
    # GRO-merged ones twice that); lengths come from the IP header, 20 + 32 bytes of
    # IP and TCP (with timestamps) headers on every segment
    assert sum(p.payload in (1448, 2896) for p in data) > 0.9 * len(data)
    assert all(p.ip_len == p.payload + 52 for p in data)


def test_linux_cooked_v2_and_pcapng_give_the_same_packets() -> None:
    sll2 = read_capture(_bytes("tcp-6mbit-any.pcap"))
    ng = read_capture(_bytes("tcp-6mbit-any.pcapng"))
    assert sll2.linktypes == ng.linktypes == (276,)
    assert ng.format == "pcapng" and len(ng.packets) == 200
    assert sll2.packets == ng.packets


def _rewrite(data: bytes, *, linktype: int, link: bytes, strip: int,
             ns_big_endian: bool = False) -> bytes:
    """The Ethernet capture with each frame's 14-byte header replaced by ``link``."""
    out = bytearray()
    magic, order = (0xA1B23C4D, ">") if ns_big_endian else (0xA1B2C3D4, "<")
    out += struct.pack(order + "IHHiIII", magic, 2, 4, 0, 96, 65535, linktype)[:24]
    for f in iter_frames(data):
        frame = link + data[f.start + strip : f.start + f.caplen]
        frac = (f.ts_ns % 1_000_000_000) // (1 if ns_big_endian else 1000)
        out += struct.pack(order + "IIII", f.ts_ns // 1_000_000_000, frac, len(frame),
                           f.orig_len - strip + len(link))
        out += frame
    return bytes(out)


@pytest.mark.parametrize(
    ("linktype", "link", "big_endian"),
    [
        (LINKTYPE_RAW, b"", False),  # modems' point-to-point links, TUN devices
        (LINKTYPE_RAW, b"", True),  # nanosecond pcap written big-endian
        (LINKTYPE_LINUX_SLL, b"\x00\x00\x00\x01\x00\x06" + bytes(8) + b"\x08\x00", False),
    ],
)
def test_other_link_layers_decode_the_same_ip_packets(
    linktype: int, link: bytes, big_endian: bool
) -> None:
    eth = _bytes("tcp-6mbit-rx.pcap")
    rewritten = read_capture(
        _rewrite(eth, linktype=linktype, link=link, strip=14, ns_big_endian=big_endian))
    assert rewritten.packets == read_capture(eth).packets


def test_truncated_capture_says_where_and_keeps_what_came_before() -> None:
    data = _bytes("tcp-6mbit-rx.pcap")
    cut = data[: len(data) - 50]
    with pytest.raises(CaptureError) as info:
        read_capture(cut)
    err = info.value
    assert isinstance(err, Invalid)
    assert err.packets_read == 1840
    assert f"truncated at byte {err.offset} of {len(cut)}" in str(err)
    assert "strict=False" in str(err)
    lenient = read_capture(cut, strict=False)
    assert len(lenient.packets) == 1840 and lenient.damage is not None
    assert lenient.packets == read_capture(data).packets[:1840]


def test_truncated_pcapng_block_and_bad_length() -> None:
    data = _bytes("tcp-6mbit-any.pcapng")
    lenient = read_capture(data[:-10], strict=False)
    assert len(lenient.packets) == 199 and lenient.damage is not None
    hundredth = list(iter_frames(data))[99]
    block = hundredth.start - 28  # enhanced packet block: 28 bytes before the data
    damaged = bytearray(data)
    damaged[block + 4 : block + 8] = struct.pack("<I", 13)  # not a multiple of 4
    with pytest.raises(CaptureError, match=f"damaged at byte {block}") as info:
        read_capture(bytes(damaged))
    assert info.value.packets_read == 99


@pytest.mark.parametrize("data", [b"", b"GIF89a", b"\xd4\xc3\xb2\xa1\x02\x00"])
def test_not_a_capture_or_cut_in_the_file_header(data: bytes) -> None:
    with pytest.raises(CaptureError, match="pcap"):
        read_capture(data)
